/* HCQ graph replays compared with eager execution of the same items (the ground truth), buffer by
 * buffer, over several replays. */
#include "world.h"

TestSuite(graph, .timeout = 180);

static hcq_operand_t I(int64_t v) { return hcq_imm(v); }

enum { N = 256 };

Test(graph, two_writes_to_one_buffer) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 0, N, 3);
  world_item_t items[3];
  world_mix(&w, &items[0], a, b, c, I(2), I(1), I(N), NULL);
  world_mix(&w, &items[1], a, c, c, I(3), I(7), I(N / 2), NULL);
  world_mix(&w, &items[2], b, a, a, I(1), I(0), I(N), NULL); /* sees the second write */
  hcq_graph_t *g = world_graph(&w, items, 3, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 3, 4);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, read_then_write) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 0, N, 3);
  world_item_t items[2];
  world_mix(&w, &items[0], b, a, c, I(5), I(1), I(N), NULL); /* reads a */
  world_mix(&w, &items[1], a, c, c, I(2), I(3), I(N), NULL); /* then overwrites a */
  hcq_graph_t *g = world_graph(&w, items, 2, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 2, 4);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, write_then_read) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 0, N, 3);
  world_item_t items[3];
  world_mix(&w, &items[0], a, b, c, I(2), I(9), I(N), NULL);
  world_mix(&w, &items[1], c, a, a, I(3), I(1), I(N), NULL);
  world_mix(&w, &items[2], b, c, a, I(1), I(1), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 3, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 3, 4);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, copy_after_write_and_read_after_copy) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  int d = world_buffer(&w, 1, N, 4), e = world_buffer(&w, 0, N, 5);
  world_item_t items[6];
  world_mix(&w, &items[0], a, b, b, I(2), I(1), I(N), NULL); /* write a */
  world_copy(&w, &items[1], e, a, N * 4);                    /* copy after write, same device */
  world_copy(&w, &items[2], c, a, N * 4);                    /* copy after write, to CPU:1 */
  world_mix(&w, &items[3], d, c, c, I(3), I(2), I(N), NULL); /* read after copy on CPU:1 */
  world_mix(&w, &items[4], b, e, a, I(1), I(5), I(N), NULL); /* read after copy on CPU:0 */
  world_copy(&w, &items[5], a, d, N * 2);                    /* back, half, overwriting a after reads */
  hcq_graph_t *g = world_graph(&w, items, 6, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 6, 5);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, several_graphs_sharing_buffers) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  world_item_t g1_items[2], g2_items[2];
  world_mix(&w, &g1_items[0], a, a, b, I(3), I(1), I(N), NULL);
  world_copy(&w, &g1_items[1], c, a, N * 4);
  world_copy(&w, &g2_items[0], b, c, N * 4);
  world_mix(&w, &g2_items[1], a, b, a, I(1), I(2), I(N), NULL);
  hcq_graph_t *g1 = world_graph(&w, g1_items, 2, NULL, 0, NULL, 0, false), *g2 = world_graph(&w, g2_items, 2, NULL, 0, NULL, 0, false);
  for (int r = 0; r < 6; r++) {
    /* No waiting between graphs: their order comes from the device timelines alone. */
    OK(hcq_graph_run(g1, NULL, 0, NULL, 0, false, NULL));
    OK(hcq_graph_run(g2, NULL, 0, NULL, 0, false, NULL));
    world_run_eager(&w, g1_items, 2, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, g2_items, 2, NULL, NULL, 0, NULL, 0);
  }
  world_compare(&w, "after 6 rounds of two graphs");
  OK(hcq_graph_destroy(g1));
  OK(hcq_graph_destroy(g2));
  world_close(&w);
}

Test(graph, copies_between_two_devices) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 1, N, 2), c = world_buffer(&w, 0, N, 3);
  int d = world_buffer(&w, 1, N, 4);
  world_item_t items[6];
  world_mix(&w, &items[0], a, a, c, I(3), I(1), I(N), NULL);
  world_copy(&w, &items[1], b, a, N * 4);
  world_mix(&w, &items[2], d, b, b, I(2), I(5), I(N), NULL);
  world_copy(&w, &items[3], c, d, N * 4);
  world_copy(&w, &items[4], b, c, N * 2); /* CPU:0 -> CPU:1 again, after the copy into c */
  world_mix(&w, &items[5], a, c, a, I(1), I(1), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 6, NULL, 0, NULL, 0, false);
  cr_assert_eq(hcq_graph_device_count(g), 2);
  world_replay_n(&w, g, items, 6, 6);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Eager transfers among four devices before and after each replay of a graph that copies around
 * the ring: the timelines order all of it. */
Test(graph, copies_among_four_devices_before_and_after_graph_work) {
  world_t w;
  world_open(&w, 4);
  int buf[4], tmp[4];
  for (int d = 0; d < 4; d++) {
    buf[d] = world_buffer(&w, d, N, 10 + d);
    tmp[d] = world_buffer(&w, d, N, 20 + d);
  }
  world_item_t items[8], before[4], after[4];
  for (int d = 0; d < 4; d++) {
    world_mix(&w, &items[2 * d], tmp[d], buf[d], tmp[d], I(d + 2), I(d), I(N), NULL);
    world_copy(&w, &items[2 * d + 1], buf[(d + 1) % 4], tmp[d], N * 4);
    world_copy(&w, &before[d], tmp[(d + 2) % 4], buf[d], N * 4);
    world_copy(&w, &after[d], buf[(d + 3) % 4], tmp[d], N * 2);
  }
  hcq_graph_t *g = world_graph(&w, items, 8, NULL, 0, NULL, 0, false);
  cr_assert_eq(hcq_graph_device_count(g), 4);
  for (int r = 0; r < 4; r++) {
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&before[d].item, NULL, 0));
    world_run_eager(&w, before, 4, NULL, NULL, 0, NULL, 0);
    world_replay(&w, g, items, 8, NULL, NULL, 0, NULL, 0, false, "graph among four devices");
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&after[d].item, NULL, 0));
    world_run_eager(&w, after, 4, NULL, NULL, 0, NULL, 0);
    world_compare(&w, "after the eager transfers");
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, views_of_one_buffer_used_by_different_items) {
  world_t w;
  world_open(&w, 2);
  int base = world_buffer(&w, 0, 4 * N, 1), other = world_buffer(&w, 0, N, 2), far = world_buffer(&w, 1, 2 * N, 3);
  int v0 = world_view(&w, base, 0, N), v1 = world_view(&w, base, N, N), v2 = world_view(&w, base, 2 * N, 2 * N);
  int v2a = world_view(&w, v2, N / 2, N); /* a view of a view, overlapping v2 */
  int farv = world_view(&w, far, N, N);
  world_item_t items[6];
  world_mix(&w, &items[0], v0, other, other, I(2), I(1), I(N), NULL); /* writes base via v0 */
  world_mix(&w, &items[1], v1, v0, other, I(3), I(0), I(N), NULL);    /* reads v0, writes v1: same base */
  world_copy(&w, &items[2], farv, v1, N * 4);                          /* view as copy source and destination */
  world_mix(&w, &items[3], v2a, v2a, v1, I(1), I(4), I(N), NULL);      /* in place on a view of a view */
  world_copy(&w, &items[4], v0, farv, N * 4);                          /* back into the base */
  world_mix(&w, &items[5], other, v2, v0, I(2), I(2), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 6, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 6, 5);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Variables in values and launch dims, changed every replay, including each variable's extremes. */
Test(graph, symbolic_values_and_dims_change_between_replays) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  hcq_expr_t *n = NULL, *k = NULL, *groups = NULL, *add = NULL, *half = NULL, *hgroups = NULL;
  OK(hcq_var_create("n", 1, N, &n));
  OK(hcq_var_create("k", -50, 50, &k));
  const hcq_expr_t *vars[] = {n, k};
  OK(hcq_expr_parse("(n+63)//64", vars, 2, &groups));
  OK(hcq_expr_parse("k*2+1", vars, 2, &add));
  OK(hcq_expr_parse("max(n//2, 1)", vars, 2, &half));
  OK(hcq_expr_parse("(max(n//2, 1)+63)//64", vars, 2, &hgroups));
  world_item_t items[4];
  world_mix(&w, &items[0], a, a, b, hcq_sym(k), hcq_sym(add), hcq_sym(n), groups);
  world_copy(&w, &items[1], c, a, N * 4);
  world_mix(&w, &items[2], c, c, c, I(3), hcq_sym(k), hcq_sym(half), hgroups);
  world_mix(&w, &items[3], b, a, b, hcq_sym(add), I(1), hcq_sym(n), groups);
  hcq_var_value_t init[] = {{n, 10}, {k, 0}};
  hcq_graph_t *g = world_graph(&w, items, 4, NULL, 0, init, 2, false);
  cr_assert_eq(hcq_graph_var_count(g), 2);
  int64_t ns[] = {1, N, 37, 64, 65, 1, N, 200}, ks[] = {-50, 50, 0, 7, -3, 50, -50, 1};
  for (int r = 0; r < 8; r++) {
    hcq_var_value_t vals[] = {{k, ks[r]}, {n, ns[r]}};
    char what[64];
    snprintf(what, sizeof(what), "replay %d (n=%ld k=%ld)", r, (long)ns[r], (long)ks[r]);
    world_replay(&w, g, items, 4, NULL, NULL, 0, vals, 2, r % 3 == 0, what);
  }
  /* A replay may pass only some variables: the others keep their last value. */
  hcq_var_value_t only_k[] = {{k, 5}}, both[] = {{k, 5}, {n, 200}};
  OK(hcq_graph_run(g, NULL, 0, only_k, 1, true, NULL));
  world_run_eager(&w, items, 4, NULL, NULL, 0, both, 2);
  world_compare(&w, "replay with only k");
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_expr_release(k);
  hcq_expr_release(groups);
  hcq_expr_release(add);
  hcq_expr_release(half);
  hcq_expr_release(hgroups);
  world_close(&w);
}

/* Inputs replaced between replays, as kernel arguments and as both ends of copies. */
Test(graph, input_buffers_swapped_between_replays) {
  world_t w;
  world_open(&w, 2);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2), x3 = world_buffer(&w, 0, N, 3);
  int src = world_buffer(&w, 1, N, 4), src2 = world_buffer(&w, 1, N, 5);
  int dst = world_buffer(&w, 0, N, 6), dst2 = world_buffer(&w, 0, N, 7);
  int acc = world_buffer(&w, 0, N, 8);
  world_item_t items[4];
  world_mix(&w, &items[0], acc, x, acc, I(2), I(1), I(N), NULL); /* input as a kernel argument */
  world_copy(&w, &items[1], dst, src, N * 4);                   /* inputs as both copy ends */
  world_mix(&w, &items[2], acc, dst, x, I(1), I(3), I(N), NULL);
  world_copy(&w, &items[3], src, acc, N * 4);                   /* input as a copy destination, CPU:0 -> CPU:1 */
  int inputs[] = {x, src, dst};
  hcq_graph_t *g = world_graph(&w, items, 4, inputs, 3, NULL, 0, false);
  int swaps[][3] = {{-1, -1, -1}, {x2, -1, -1}, {x3, src2, dst2}, {x, src, dst2}, {x2, src2, -1}, {x3, -1, dst}};
  for (int r = 0; r < 6; r++) {
    char what[32];
    snprintf(what, sizeof(what), "replay %d", r);
    world_replay(&w, g, items, 4, inputs, swaps[r], 3, NULL, 0, r % 2, what);
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Eager work queued on the devices before a replay runs first; eager work right after runs after. */
Test(graph, eager_work_pending_before_and_submitted_after_a_replay) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, 64 * N, 1), b = world_buffer(&w, 1, 64 * N, 2), c = world_buffer(&w, 0, 64 * N, 3);
  world_item_t items[3], before[2], after[2];
  world_mix(&w, &items[0], a, a, c, I(3), I(1), I(64 * N), NULL);
  world_copy(&w, &items[1], b, a, 64 * N * 4);
  world_mix(&w, &items[2], c, c, a, I(1), I(2), I(64 * N), NULL);
  /* Large eager kernels, so that they are still running when the replay is submitted. */
  world_mix(&w, &before[0], a, c, a, I(5), I(5), I(64 * N), NULL);
  world_mix(&w, &before[1], b, b, b, I(7), I(1), I(64 * N), NULL);
  world_mix(&w, &after[0], c, a, c, I(2), I(0), I(64 * N), NULL);
  world_mix(&w, &after[1], b, b, b, I(3), I(3), I(64 * N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 3, NULL, 0, NULL, 0, false);
  for (int r = 0; r < 5; r++) {
    for (int i = 0; i < 2; i++)
      for (int rep = 0; rep < 3; rep++) OK(hcq_exec_item_run(&before[i].item, NULL, 0));
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
    for (int i = 0; i < 2; i++) OK(hcq_exec_item_run(&after[i].item, NULL, 0));
    for (int rep = 0; rep < 3; rep++) world_run_eager(&w, before, 2, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, items, 3, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, after, 2, NULL, NULL, 0, NULL, 0);
    world_compare(&w, "eager before, graph, eager after");
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph, long_chain_and_replay_without_wait) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2);
  world_item_t items[200];
  for (int j = 0; j < 200; j++) world_mix(&w, &items[j], j % 2 ? a : b, j % 2 ? b : a, a, I(j % 5 + 1), I(j), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 200, NULL, 0, NULL, 0, false);
  for (int r = 0; r < 20; r++) {
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
    world_run_eager(&w, items, 200, NULL, NULL, 0, NULL, 0);
  }
  world_compare(&w, "20 replays of a 200-kernel chain");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* ---- the randomized fuzz ---- */

Test(graph, randomized_fuzz, .timeout = 300) {
  uint32_t seed = 20261129;
  world_vars_t v;
  world_vars_open(&v);
  for (int round = 0; round < 24; round++) {
    world_t w;
    world_random_t rw;
    world_random(&w, &seed, &v, &rw);
    hcq_var_value_t init[] = {{v.n, 64}, {v.k, 1}};
    hcq_graph_t *g = world_graph(&w, rw.items, rw.nitems, rw.inputs, rw.ninputs, init, 2, false);
    for (int r = 0; r < 6; r++) {
      int swaps[WORLD_MAX_DEVS];
      hcq_var_value_t vals[2];
      world_random_replay(&rw, &seed, &v, swaps, vals);
      char what[96];
      snprintf(what, sizeof(what), "fuzz round %d (%d devices, %d items) replay %d", round, w.ndev, rw.nitems, r);
      world_replay(&w, g, rw.items, rw.nitems, rw.inputs, swaps, rw.ninputs, vals, 2, seed % 2, what);
    }
    OK(hcq_graph_destroy(g));
    world_close(&w);
  }
  world_vars_close(&v);
}

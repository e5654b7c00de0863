/* HCQ graph replays on CPU devices compared with eager execution of the same items (the ground
 * truth), buffer by buffer, over several replays. The scenarios every backend runs (views,
 * variables, input swaps, eager work around replays, long chains, four devices) are in
 * test_conformance.c; these are the CPU-only ones and the larger fuzz. */
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

Test(graph, several_graphs_sharing_buffers) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  world_item_t g1_items[2], g2_items[2];
  world_mix(&w, &g1_items[0], a, a, b, I(3), I(1), I(N), NULL);
  world_copy(&w, &g1_items[1], c, a, N * 4);
  world_copy(&w, &g2_items[0], b, c, N * 4);
  world_mix(&w, &g2_items[1], a, b, a, I(1), I(2), I(N), NULL);
  hcq_graph_t *g1 = world_graph(&w, g1_items, 2, NULL, 0, NULL, 0, false),
              *g2 = world_graph(&w, g2_items, 2, NULL, 0, NULL, 0, false);
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

/* ---- the randomized fuzz ---- */

Test(graph, randomized_fuzz, .timeout = 300) {
  world_graph_fuzz(&test_backends[0], 20261129, 24, 6);
}

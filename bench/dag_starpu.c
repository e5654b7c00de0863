/* The hand-off DAGs (dag.h) as StarPU tasks on CPU workers, dependencies implied by data access
 * modes on registered handles (sequential consistency): fan-out/fan-in (66 tasks) and a 1000-task
 * chain on one handle; each replay submitted then waited with starpu_task_wait_for_all.
 *
 *   dag_starpu [REPLAYS]                               (default 301)
 */
#include <starpu.h>
#include <string.h>

#include "dag.h"
#include "rows.h"

static void cpu_produce(void *buffers[], void *arg) {
  (void)arg;
  dag_produce((int32_t *)STARPU_VARIABLE_GET_PTR(buffers[0]));
}
static void cpu_consume(void *buffers[], void *arg) {
  int i;
  starpu_codelet_unpack_args(arg, &i);
  dag_consume((int32_t *)STARPU_VARIABLE_GET_PTR(buffers[0]),
              (const int32_t *)STARPU_VARIABLE_GET_PTR(buffers[1]), i);
}
static void cpu_fanin(void *buffers[], void *arg) {
  (void)arg;
  int32_t *out = (int32_t *)STARPU_VARIABLE_GET_PTR(buffers[0]);
  for (int i = 0; i < DAG_FAN; i++)
    dag_fanin(out, (const int32_t *)STARPU_VARIABLE_GET_PTR(buffers[1 + i]), 1);
}
static void cpu_step(void *buffers[], void *arg) {
  (void)arg;
  int32_t *x = (int32_t *)STARPU_VARIABLE_GET_PTR(buffers[0]);
  dag_step(x, x);
}

static struct starpu_codelet cl_produce = {
    .cpu_funcs = {cpu_produce}, .nbuffers = 1, .modes = {STARPU_RW}};
static struct starpu_codelet cl_consume = {
    .cpu_funcs = {cpu_consume}, .nbuffers = 2, .modes = {STARPU_W, STARPU_R}};
static struct starpu_codelet cl_fanin = {.cpu_funcs = {cpu_fanin},
                                         .nbuffers = STARPU_VARIABLE_NBUFFERS};
static struct starpu_codelet cl_step = {
    .cpu_funcs = {cpu_step}, .nbuffers = 1, .modes = {STARPU_RW}};

#define TRY(call)                                                  \
  do {                                                             \
    int rc_ = (call);                                              \
    if (rc_) {                                                     \
      fprintf(stderr, "dag_starpu: %s failed (%d)\n", #call, rc_); \
      exit(1);                                                     \
    }                                                              \
  } while (0)

int main(int argc, char **argv) {
  int replays = argc > 1 ? atoi(argv[1]) : 301;
  if (replays < 1) return 2;
  TRY(starpu_init(NULL));
  int32_t p = 1, r[DAG_FAN], out = 0, x = 0;
  memset(r, 0, sizeof(r));
  starpu_data_handle_t hp, hr[DAG_FAN], hout, hx;
  starpu_variable_data_register(&hp, STARPU_MAIN_RAM, (uintptr_t)&p, sizeof(p));
  for (int i = 0; i < DAG_FAN; i++)
    starpu_variable_data_register(&hr[i], STARPU_MAIN_RAM, (uintptr_t)&r[i], sizeof(r[i]));
  starpu_variable_data_register(&hout, STARPU_MAIN_RAM, (uintptr_t)&out, sizeof(out));
  starpu_variable_data_register(&hx, STARPU_MAIN_RAM, (uintptr_t)&x, sizeof(x));
  struct starpu_data_descr descr[DAG_FAN + 1];
  descr[0] = (struct starpu_data_descr){hout, STARPU_RW};
  for (int i = 0; i < DAG_FAN; i++) descr[1 + i] = (struct starpu_data_descr){hr[i], STARPU_R};
  double *fan = malloc((size_t)replays * sizeof(double)),
         *chain = malloc((size_t)replays * sizeof(double));
  for (int rep = -20; rep < replays; rep++) {
    double t0 = bench_now_s();
    TRY(starpu_task_insert(&cl_produce, STARPU_RW, hp, 0));
    for (int i = 0; i < DAG_FAN; i++)
      TRY(starpu_task_insert(&cl_consume, STARPU_W, hr[i], STARPU_R, hp, STARPU_VALUE, &i,
                             sizeof(i), 0));
    TRY(starpu_task_insert(&cl_fanin, STARPU_DATA_MODE_ARRAY, descr, DAG_FAN + 1, 0));
    TRY(starpu_task_wait_for_all());
    if (rep >= 0) fan[rep] = bench_now_s() - t0;
  }
  for (int rep = -5; rep < replays; rep++) {
    double t0 = bench_now_s();
    for (int k = 0; k < DAG_CHAIN; k++) TRY(starpu_task_insert(&cl_step, STARPU_RW, hx, 0));
    TRY(starpu_task_wait_for_all());
    if (rep >= 0) chain[rep] = bench_now_s() - t0;
  }
  char note[128];
  snprintf(note, sizeof(note), "%u CPU workers; 66 tasks, wait_for_all per replay",
           starpu_cpu_worker_get_count());
  emit_row("fan-out/fan-in 1->64->1, CPU:0+CPU:1", "StarPU tasks", bench_median(fan, replays) * 1e6,
           "us", note);
  snprintf(note, sizeof(note), "%u CPU workers; 1000 tasks on one handle",
           starpu_cpu_worker_get_count());
  emit_row("chain of 1000, alternating CPU:0/CPU:1", "StarPU tasks",
           bench_median(chain, replays) * 1e6, "us", note);
  starpu_data_unregister(hp);
  for (int i = 0; i < DAG_FAN; i++) starpu_data_unregister(hr[i]);
  starpu_data_unregister(hout);
  starpu_data_unregister(hx);
  starpu_shutdown();
  free(fan);
  free(chain);
  return 0;
}

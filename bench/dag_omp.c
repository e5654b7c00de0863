/* The hand-off DAGs (dag.h) as OpenMP tasks with depend clauses: the fan-out/fan-in (66 tasks) and
 * the 1000-task chain, each replay submitted by one thread inside `parallel`/`single` and finished
 * with `taskwait`. Built against libgomp (gcc) and, where installed, LLVM's libomp (clang).
 *
 *   dag_omp RUNTIME_NAME [REPLAYS]                     (default 301)
 */
#include <omp.h>
#include <string.h>

#include "dag.h"
#include "rows.h"

#define R8(i) r[i], r[i + 1], r[i + 2], r[i + 3], r[i + 4], r[i + 5], r[i + 6], r[i + 7]
#define R64 R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56)

int main(int argc, char **argv) {
  const char *runtime = argc > 1 ? argv[1] : "OpenMP";
  int replays = argc > 2 ? atoi(argv[2]) : 301;
  if (replays < 1) return 2;
  double *fan = malloc((size_t)replays * sizeof(double)),
         *chain = malloc((size_t)replays * sizeof(double));
  int32_t p = 1, r[DAG_FAN], out = 0, x = 0;
  int threads = 0;
#pragma omp parallel
#pragma omp single
  {
    threads = omp_get_num_threads();
    for (int rep = -20; rep < replays; rep++) {
      double t0 = bench_now_s();
#pragma omp task depend(out : p) shared(p)
      dag_produce(&p);
      for (int i = 0; i < DAG_FAN; i++) {
#pragma omp task depend(in : p) depend(out : r[i]) shared(p, r) firstprivate(i)
        dag_consume(&r[i], &p, i);
      }
#pragma omp task depend(in : R64) shared(r, out)
      dag_fanin(&out, r, DAG_FAN);
#pragma omp taskwait
      if (rep >= 0) fan[rep] = bench_now_s() - t0;
    }
    for (int rep = -20; rep < replays; rep++) {
      double t0 = bench_now_s();
      for (int k = 0; k < DAG_CHAIN; k++) {
#pragma omp task depend(inout : x) shared(x)
        dag_step(&x, &x);
      }
#pragma omp taskwait
      if (rep >= 0) chain[rep] = bench_now_s() - t0;
    }
  }
  char name[128], note[128];
  snprintf(name, sizeof(name), "OpenMP tasks + depend (%s)", runtime);
  snprintf(note, sizeof(note), "%d threads; 66 tasks, taskwait per replay", threads);
  emit_row("fan-out/fan-in 1->64->1, CPU:0+CPU:1", name, bench_median(fan, replays) * 1e6, "us",
           note);
  snprintf(note, sizeof(note), "%d threads; 1000 tasks, depend(inout) on one variable", threads);
  emit_row("chain of 1000, alternating CPU:0/CPU:1", name, bench_median(chain, replays) * 1e6, "us",
           note);
  free(fan);
  free(chain);
  return out == 12345 ? 1 : 0; /* keeps the work observable */
}

/* Pieces of the hcq command shared between its files. */
#ifndef HCQ_CLI_H
#define HCQ_CLI_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stdio.h>

/* Exit codes (docs/cli.md). */
enum {
  HCQ_EXIT_OK = 0,
  HCQ_EXIT_CHECK_MISMATCH = 1,
  HCQ_EXIT_BAD_INPUT = 2,
  HCQ_EXIT_RUNTIME = 3,
};

/* Prints "hcq: message" and returns the exit code for the failure: 2 for bad input, 3 for the
 * machine failing (compile errors, timeouts, devices). Frees st. */
int cli_fail(hcq_status_t st);
/* Prints "hcq: " + message to stderr and returns HCQ_EXIT_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses a whole non-negative decimal integer in [lo, hi]. */
bool cli_parse_uint(const char *s, unsigned long long lo, unsigned long long hi,
                    unsigned long long *out);

/* The device kind the commands run on without --device: the one place the tool names a kind. */
#define CLI_DEFAULT_KIND HCQ_DEVICE_CPU
/* A device kind by its name (hcq_device_kind_name), in upper or lower case: "VULKAN", "cuda". */
bool cli_parse_device_kind(const char *s, hcq_device_kind_t *out);

/* Prints text the user gave (cli/text.c): control characters (ESC, C1, DEL, ...) and bytes that
 * are not UTF-8 escaped (\x1b, \u0085, \n; in JSON \u001b and \ufffd) so that a terminal shows
 * them instead of acting on them and JSON stays valid; a backslash doubled. With max_chars > 0, at
 * most that many characters and "..." after them, cut between characters. json adds the quotes. */
void cli_print_text(FILE *out, const char *text, size_t max_chars, bool json);

/* Synchronizes every device of a loaded file. */
hcq_status_t cli_sync_file(const hcq_graph_file_t *gf);

/* The help text of command (NULL: of hcq itself), or NULL for an unknown command (cli/help.c). */
const char *cli_help_text(const char *command);
/* Whether the arguments ask for help (-h or --help anywhere). */
bool cli_wants_help(int argc, char **argv);
/* Observability options of hcq run (cli/observe.c). */
typedef struct cli_observe {
  const char *profile;     /* --profile OUT.json */
  const char *profile_svg; /* --profile-svg OUT.svg */
  const char *dot;         /* --dot OUT.dot */
  bool verbose;            /* -v: memory per device */
} cli_observe_t;

/* Starts the profiler when a profile or a timeline is asked for; paused when paused is set. */
hcq_status_t cli_observe_start(const cli_observe_t *o, bool paused);
/* After the runs: writes the profile, the timeline and the graph dump, prints the memory of gf's
 * devices with -v, and stops the profiler. jit may be NULL (nothing was built). */
hcq_status_t cli_observe_finish(const cli_observe_t *o, hcq_jit_t *jit, const hcq_graph_file_t *gf);
/* Stops the profiler (after a failure). */
void cli_observe_abort(const cli_observe_t *o);
/* hcq info's memory lines: the kernel cache on disk and what a freshly opened CPU:0 holds. */
void cli_info_memory(void);

/* Under mpirun (cli/cli_mpi.c; stand-ins without the MPI layer): start starts the MPI layer when
 * the launcher's environment says so and silences stdout on ranks other than 0; fetch copies a
 * buffer's bytes to rank 0 from the rank that holds them (every rank calls it, in the same order);
 * finish agrees on the exit status (the maximum over the ranks) and stops the layer. give_up,
 * called when a rank reports a failure (cli_fail), declares every other rank lost when the failure
 * can leave queues stuck (a timeout, a lost device, a lost peer), so teardown does not wait for
 * them, and finish then ends the whole job with MPI_Abort: nobody waits for a rank that stopped or
 * died. */
hcq_status_t cli_mpi_start(void);
int cli_mpi_rank(void);
int cli_mpi_size(void);
bool cli_mpi_on(void);
hcq_status_t cli_mpi_fetch(hcq_buffer_t *buf, void *dst, uint64_t size);
/* The largest of every rank's value (every rank calls it, in the same order). */
hcq_status_t cli_mpi_max(int value, int *out_max);
void cli_mpi_give_up(hcq_status_code_t code, const char *why);
int cli_mpi_finish(int rc);

int cli_run(int argc, char **argv);
int cli_compile(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_embed(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_chat(int argc, char **argv); /* hcq chat: hcq generate --interactive */
int cli_tokenize(int argc, char **argv);
/* hcq serve (cli/serve.c; cli/serve_absent.c in a build without libmicrohttpd). */
int cli_serve(int argc, char **argv);
int cli_inspect(int argc, char **argv); /* cli/inspect.c */

#endif

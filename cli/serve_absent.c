/* hcq serve in a build without libmicrohttpd: says how to get it. */
#include "cli/cli.h"

int cli_serve(int argc, char **argv) {
  (void)argc, (void)argv;
  return cli_usage_error(
      "serve: this hcq was built without libmicrohttpd (install libmicrohttpd-dev, or run "
      "scripts/install-deps.sh, and build again)");
}

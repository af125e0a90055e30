/* harness/tune_profile.c: tuned knob profiles (tune_profile.h). */
#define _GNU_SOURCE
#include "harness/tune_profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define MAX_PROFILE_BYTES (1u << 20)

/* ---- this machine ---- */

static void first_line(const char *path, char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fgets(buf, (int)n, f)) buf[strcspn(buf, "\r\n")] = 0;
  fclose(f);
}

static void cpu_model(char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *v = strchr(line, ':');
    if (!v) continue;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(buf, n, "%s", v);
    buf[strcspn(buf, "\r\n")] = 0;
    break;
  }
  fclose(f);
}

static uint64_t mem_total(void) { /* MemTotal: the kernel's total RAM pages */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int spill_tune_machine_probe(const char *model_dir, spill_tune_machine *m, spill_err *e) {
  memset(m, 0, sizeof *m);
  first_line("/etc/machine-id", m->machine_id, sizeof m->machine_id);
  if (!m->machine_id[0])
    first_line("/var/lib/dbus/machine-id", m->machine_id, sizeof m->machine_id);
  cpu_model(m->cpu, sizeof m->cpu);
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  m->cpus = c > 0 ? (int)c : 1;
  m->ram = mem_total();
  struct stat st;
  if (stat(model_dir, &st) != 0)
    return spill_err_set(e, SPILL_E_IO, "%s: %s", model_dir, strerror(errno));
  snprintf(m->device, sizeof m->device, "%u:%u", major(st.st_dev), minor(st.st_dev));
  return SPILL_OK;
}

/* ---- where ---- */

int spill_tune_profile_path(const spill_info *model, char *buf, size_t n, spill_err *e) {
  char dir[PATH_MAX];
  const char *d = getenv("SPILL_TUNE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  int w;
  if (d && *d) w = snprintf(dir, sizeof dir, "%s", d);
  else if (x && *x) w = snprintf(dir, sizeof dir, "%s/spill/tune", x);
  else if (h && *h) w = snprintf(dir, sizeof dir, "%s/.cache/spill/tune", h);
  else
    return spill_err_set(e, SPILL_E_INVALID_ARG,
                         "tune: no profile directory (set SPILL_TUNE_DIR, XDG_CACHE_HOME or HOME)");
  SPILL_FAIL_IF(e, w < 0 || (size_t)w >= sizeof dir, SPILL_E_INVALID_ARG,
                "tune: profile directory path too long");
  /* the model's name as a file-name part: [A-Za-z0-9._-], others '_' */
  char name[64];
  size_t k = 0;
  for (const char *s = model->name; *s && k + 1 < sizeof name; s++)
    name[k++] = (strchr("._-", *s) || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                 (*s >= '0' && *s <= '9'))
                    ? *s
                    : '_';
  name[k] = 0;
  w = snprintf(buf, n, "%s/%016llx-%s.json", dir, (unsigned long long)model->container_id,
               k ? name : "model");
  SPILL_FAIL_IF(e, w < 0 || (size_t)w >= n, SPILL_E_INVALID_ARG, "tune: profile path too long");
  return SPILL_OK;
}

/* ---- write ---- */

static int mkdirs(const char *path, spill_err *e) { /* the directories above path */
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      return spill_err_set(e, SPILL_E_IO, "tune: cannot create %s: %s", p, strerror(errno));
    *s = '/';
  }
  return SPILL_OK;
}

int spill_tune_profile_save(const char *path, const spill_tune_profile *p,
                            const cJSON *evidence,
                            spill_err *e) {
  cJSON *j = cJSON_CreateObject(), *mo = cJSON_CreateObject(), *ma = cJSON_CreateObject(),
        *kn = cJSON_CreateObject();
  char id[24];
  snprintf(id, sizeof id, "%016llx", (unsigned long long)p->container_id);
  cJSON_AddNumberToObject(j, "version", SPILL_TUNE_VERSION);
  cJSON_AddStringToObject(mo, "container_id", id);
  cJSON_AddStringToObject(mo, "name", p->model_name);
  cJSON_AddItemToObject(j, "model", mo);
  cJSON_AddStringToObject(ma, "machine_id", p->machine.machine_id);
  cJSON_AddStringToObject(ma, "cpu", p->machine.cpu);
  cJSON_AddNumberToObject(ma, "cpus", p->machine.cpus);
  cJSON_AddNumberToObject(ma, "ram", (double)p->machine.ram);
  cJSON_AddStringToObject(ma, "device", p->machine.device);
  cJSON_AddItemToObject(j, "machine", ma);
  cJSON_AddStringToObject(j, "measured_at", p->measured_at);
  cJSON_AddStringToObject(j, "commit", p->commit);
  for (int i = 0; i < p->n_knobs; i++) cJSON_AddStringToObject(kn, p->knobs[i].name, p->knobs[i].value);
  cJSON_AddItemToObject(j, "knobs", kn);
  if (evidence) cJSON_AddItemToObject(j, "evidence", cJSON_Duplicate(evidence, 1));
  char *text = spill_json_print(j, 1);
  cJSON_Delete(j);
  SPILL_FAIL_IF(e, !text, SPILL_E_NOMEM, "tune: out of memory");
  int rc = mkdirs(path, e);
  if (rc == SPILL_OK) rc = spill_write_file_atomic(path, text, strlen(text), e);
  free(text);
  return rc;
}

/* ---- read ---- */

static int copy_str(const cJSON *o, const char *key, const char *path, char *dst, size_t n,
                    int allow_empty, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  SPILL_FAIL_IF(e, !cJSON_IsString(v), SPILL_E_CONFIG, "%s.%s: expected a string", path, key);
  size_t len = strlen(v->valuestring);
  SPILL_FAIL_IF(e, len >= n, SPILL_E_CONFIG, "%s.%s: longer than %zu bytes", path, key, n - 1);
  SPILL_FAIL_IF(e, !allow_empty && len == 0, SPILL_E_CONFIG, "%s.%s: empty", path, key);
  memcpy(dst, v->valuestring, len + 1);
  return SPILL_OK;
}

static int parse_profile(const cJSON *j, const char *src, spill_tune_profile *p, spill_err *e) {
  static const char *const top[] = {"version", "model", "machine", "measured_at", "commit",
                                    "knobs", "evidence", NULL};
  static const char *const mk[] = {"container_id", "name", NULL};
  static const char *const hk[] = {"machine_id", "cpu", "cpus", "ram", "device", NULL};
  const int C = SPILL_E_CONFIG;
  SPILL_FAIL_IF(e, !cJSON_IsObject(j), C, "%s: expected a JSON object", src);
  SPILL_TRY(spill_json_only_keys(j, src, top, C, e));
  int64_t v;
  SPILL_TRY(spill_json_int(j, "version", src, 1, 1000, &v, C, e));
  SPILL_FAIL_IF(e, v != SPILL_TUNE_VERSION, C,
                "%s: version %lld, this spill reads version %d (re-run spill tune)", src,
                (long long)v, SPILL_TUNE_VERSION);
  p->version = (int)v;
  char path[64];
  const cJSON *mo, *ma, *kn;
  snprintf(path, sizeof path, "%s.model", src);
  SPILL_TRY(spill_json_obj(j, "model", src, &mo, C, e));
  SPILL_TRY(spill_json_only_keys(mo, path, mk, C, e));
  char id[24];
  SPILL_TRY(copy_str(mo, "container_id", path, id, sizeof id, 0, e));
  char *end = NULL;
  errno = 0;
  unsigned long long cid = strtoull(id, &end, 16);
  SPILL_FAIL_IF(e, strlen(id) != 16 || errno || *end, C,
                "%s.container_id: \"%s\": expected 16 hex digits", path, id);
  p->container_id = cid;
  SPILL_TRY(copy_str(mo, "name", path, p->model_name, sizeof p->model_name, 1, e));
  snprintf(path, sizeof path, "%s.machine", src);
  SPILL_TRY(spill_json_obj(j, "machine", src, &ma, C, e));
  SPILL_TRY(spill_json_only_keys(ma, path, hk, C, e));
  SPILL_TRY(copy_str(ma, "machine_id", path, p->machine.machine_id, sizeof p->machine.machine_id,
                     1, e));
  SPILL_TRY(copy_str(ma, "cpu", path, p->machine.cpu, sizeof p->machine.cpu, 1, e));
  SPILL_TRY(spill_json_int(ma, "cpus", path, 1, 1 << 20, &v, C, e));
  p->machine.cpus = (int)v;
  SPILL_TRY(spill_json_int(ma, "ram", path, 0, (int64_t)1 << 53, &v, C, e));
  p->machine.ram = (uint64_t)v;
  SPILL_TRY(copy_str(ma, "device", path, p->machine.device, sizeof p->machine.device, 0, e));
  SPILL_TRY(copy_str(j, "measured_at", src, p->measured_at, sizeof p->measured_at, 1, e));
  SPILL_TRY(copy_str(j, "commit", src, p->commit, sizeof p->commit, 1, e));
  snprintf(path, sizeof path, "%s.knobs", src);
  SPILL_TRY(spill_json_obj(j, "knobs", src, &kn, C, e));
  p->n_knobs = 0;
  spill_config probe;
  spill_config_default(&probe);
  for (const cJSON *k = kn->child; k; k = k->next) {
    SPILL_FAIL_IF(e, p->n_knobs >= SPILL_TUNE_MAX_KNOBS, C, "%s: more than %d knobs", path,
                  SPILL_TUNE_MAX_KNOBS);
    const spill_knob *row = spill_knob_find(k->string);
    SPILL_FAIL_IF(e, !row || row->target != SPILL_KNOB_CONFIG, C, "%s.%s: not an engine knob",
                  path, k->string);
    spill_tune_knob *t = &p->knobs[p->n_knobs];
    SPILL_FAIL_IF(e, strlen(k->string) >= sizeof t->name, C, "%s.%s: name too long", path,
                  k->string);
    snprintf(t->name, sizeof t->name, "%s", k->string);
    SPILL_TRY(copy_str(kn, k->string, path, t->value, sizeof t->value, 0, e));
    spill_err ke = {0};
    int rc = spill_config_set(&probe, t->name, t->value, &ke);
    SPILL_FAIL_IF(e, rc != SPILL_OK, C, "%s.%s: %s", path, t->name, ke.msg);
    p->n_knobs++;
  }
  return SPILL_OK;
}

int spill_tune_profile_load(const char *path, spill_tune_profile *p, spill_err *e) {
  memset(p, 0, sizeof *p);
  char *text = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(path, MAX_PROFILE_BYTES, &text, &len, e));
  cJSON *j = NULL;
  int rc = spill_json_parse(text, len, path, SPILL_E_CONFIG, &j, e);
  free(text);
  if (rc == SPILL_OK) {
    /* fields are named by their JSON path from "profile", the file first */
    spill_err pe = {0};
    rc = parse_profile(j, "profile", p, &pe);
    if (rc) spill_err_set(e, rc, "tuned profile %s: %s", path, pe.msg);
  }
  cJSON_Delete(j);
  return rc;
}

int spill_tune_profile_check(const spill_tune_profile *p, const char *path,
                             const spill_info *model, const spill_tune_machine *here,
                             spill_err *e) {
  SPILL_FAIL_IF(e, p->container_id != model->container_id || strcmp(p->model_name, model->name),
                SPILL_E_CONFIG,
                "tuned profile %s was measured for another model (%016llx \"%s\"; this one is "
                "%016llx \"%s\")",
                path, (unsigned long long)p->container_id, p->model_name,
                (unsigned long long)model->container_id, model->name);
  const spill_tune_machine *m = &p->machine;
  const char *what = strcmp(m->machine_id, here->machine_id) ? "machine-id"
                     : strcmp(m->cpu, here->cpu)             ? "CPU"
                     : m->cpus != here->cpus                 ? "CPU count"
                     : m->ram != here->ram                   ? "RAM"
                     : strcmp(m->device, here->device)       ? "the model's device"
                                                             : NULL;
  SPILL_FAIL_IF(e, what, SPILL_E_CONFIG,
                "tuned profile %s was measured on another machine (%s differs: there "
                "machine-id %s, %s, %d CPUs, %llu bytes RAM, model on device %s; here %s, %s, "
                "%d CPUs, %llu bytes, device %s)",
                path, what, m->machine_id, m->cpu, m->cpus, (unsigned long long)m->ram,
                m->device, here->machine_id, here->cpu, here->cpus,
                (unsigned long long)here->ram, here->device);
  return SPILL_OK;
}

int spill_tune_profile_apply(const spill_tune_profile *p, spill_config *cfg,
                             int (*skip)(const char *name, void *user), void *user,
                             char *applied, size_t n, spill_err *e) {
  size_t off = 0;
  if (n) applied[0] = 0;
  for (int i = 0; i < p->n_knobs; i++) {
    const spill_tune_knob *k = &p->knobs[i];
    if (skip && skip(k->name, user)) continue;
    SPILL_TRY(spill_config_set(cfg, k->name, k->value, e));
    if (off < n) {
      int w = snprintf(applied + off, n - off, "%s%s=%s", off ? " " : "", k->name, k->value);
      if (w > 0) off += (size_t)w;
    }
  }
  return SPILL_OK;
}

int spill_tune_skip_argv(const char *name, void *user) {
  const spill_tune_argv *a = user;
  for (int i = 1; a && i < a->argc; i++) {
    const spill_knob *k = spill_knob_flag(a->argv[i]);
    if (k && !strcmp(k->name, name)) return 1;
  }
  return 0;
}

int spill_tune_for_model(const char *model_dir, const char *explicit_path, spill_config *cfg,
                         int (*skip)(const char *name, void *user), void *user, char *note,
                         size_t n, spill_err *e) {
  if (n) note[0] = 0;
  spill_info info;
  SPILL_TRY(spill_info_read(model_dir, &info, e));
  char path[PATH_MAX];
  if (explicit_path) {
    snprintf(path, sizeof path, "%s", explicit_path);
  } else {
    spill_err pe = {0};
    if (spill_tune_profile_path(&info, path, sizeof path, &pe) != SPILL_OK) return SPILL_OK;
    struct stat st;
    if (stat(path, &st) != 0) return SPILL_OK; /* never tuned here */
  }
  spill_tune_profile p;
  SPILL_TRY(spill_tune_profile_load(path, &p, e));
  spill_tune_machine here;
  SPILL_TRY(spill_tune_machine_probe(model_dir, &here, e));
  int rc = spill_tune_profile_check(&p, path, &info, &here, e);
  if (rc != SPILL_OK) {
    size_t l = strlen(e->msg);
    if (l + 1 < sizeof e->msg)
      snprintf(e->msg + l, sizeof e->msg - l, "; re-run spill tune%s",
               explicit_path ? "" : ", or pass --no-tuned");
    return rc;
  }
  char applied[512];
  SPILL_TRY(spill_tune_profile_apply(&p, cfg, skip, user, applied, sizeof applied, e));
  snprintf(note, n, "tuned: %s (%s, measured %s)", applied[0] ? applied : "nothing (every knob set by you)",
           path, p.measured_at);
  return SPILL_OK;
}

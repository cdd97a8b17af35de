/*
 * nvml_shim.c: a STAND-IN for the NVIDIA driver's NVML library (libnvidia-ml.so.1), for tests on machines without
 * an NVIDIA GPU. It is not the driver and measures nothing: it implements only the NVML C entry points that
 * harness.telemetry.NvmlProbe and benchmarks/nvml_check.py reach through nvidia-ml-py (module pynvml), with the
 * signatures, struct layouts and return codes of nvml.h, and answers from a script of values.
 *
 * Script: the file named by env NVML_SHIM_SCRIPT, "key = value" lines, '#' comments. It is re-read whenever the file
 * changes (write a new file and rename it over the old one), so a test can change values mid-run. Keys:
 *   name uuid driver_version nvml_version device_count (at most 8)
 *   name.<i> uuid.<i> pci_bus_id.<i> (device i's own; unset: name, uuid (device 0's, with its last digit replaced by
 *       i for i > 0) and the PCI bus 00000000:<i+1>:00.0, so NVML's order follows the bus unless a script says not)
 *   power_mw (NVML_FI_DEV_POWER_INSTANT) power_avg_mw (NVML_FI_DEV_POWER_AVERAGE) power_usage_mw (nvmlDeviceGetPowerUsage)
 *   energy_start_mj energy_update_ms counter_epoch   (the energy counter is the integral of power_mw since the
 *       script was first read, plus energy_start_mj, republished every energy_update_ms (0 = on every call);
 *       a new counter_epoch restarts it at 0, as a driver reload or GPU reset does)
 *   temperature_c sm_clock_mhz mem_clock_mhz util_gpu util_mem mem_total mem_reserved mem_used (bytes)
 *   limit_enforced_mw limit_mgmt_mw limit_default_mw clock_events (nvmlClocksEventReasons bit mask)
 *   limit_min_mw limit_max_mw (nvmlDeviceGetPowerManagementLimitConstraints)
 *   root (0: nvmlDeviceSetPowerManagementLimit, nvmlDeviceSetGpuLockedClocks and nvmlDeviceResetGpuLockedClocks answer
 *       NVML_ERROR_NO_PERMISSION, as for a non-root user or a VM without the privilege; default 1)
 *   max_sm_clock_mhz min_sm_clock_mhz sm_clock_step_mhz (nvmlDeviceGetMaxClockInfo; nvmlDeviceGetSupportedGraphicsClocks
 *       lists max down to min in steps, for the one supported memory clock mem_clock_mhz)
 *   follow_limits idle_power_mw (1: the power the shim reports and integrates follows the limits in force, as a real
 *       board's does: power_mw with its dynamic part (above idle_power_mw) scaled by (locked SM clock / max)^2, then
 *       clipped at the enforced power limit; the reported SM clock is clipped at the locked maximum; default 0)
 *   Locked SM clocks set with nvmlDeviceSetGpuLockedClocks persist like the limit, in "<NVML_SHIM_SCRIPT>.clocks",
 *   until nvmlDeviceResetGpuLockedClocks removes that file.
 *   A limit set with nvmlDeviceSetPowerManagementLimit persists, as the driver's does, across processes: it is
 *   written to the file "<NVML_SHIM_SCRIPT>.limit" and then answers both limit getters (management and enforced)
 *   until that file is removed (the tests' stand-in for a driver reload).
 *   init_ret (nvmlInit's return code) gpu_lost (1: every device call returns NVML_ERROR_GPU_IS_LOST)
 *   delay_ms (every device call takes this long: a slow driver)
 *   fail.<function> = code (that entry point returns code)   field.<id> = code (that field's nvmlReturn)
 * Without NVML_SHIM_SCRIPT, nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED (a library but no driver).
 * One extra, non-NVML symbol: nvmlShimCallCount(name), how often an entry point was called (for tests).
 *
 * Build (the test suite does this): gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1
 * nvml_shim.c -lpthread [-DOMIT_<entry point> ...] ; an omitted entry point is absent from the library, as on an
 * older driver, and nvidia-ml-py then raises NVML_ERROR_FUNCTION_NOT_FOUND for it. Guarded so: the field-values
 * call, nvmlDeviceGetMemoryInfo_v2 and both clock-event calls.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_GPU_IS_LOST = 15,
       NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999 };
enum { FI_POWER_AVERAGE = 185, FI_POWER_INSTANT = 186, FI_ENERGY = 191, SCOPE_GPU = 0 };
enum { VT_UNSIGNED_INT = 1, VT_UNSIGNED_LONG_LONG = 3 };

typedef struct shim_device { unsigned int index; } *nvmlDevice_t;
typedef union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal;
                int siVal; unsigned short usVal; } nvmlValue_t;
typedef struct { unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType; nvmlReturn_t nvmlReturn;
                 nvmlValue_t value; } nvmlFieldValue_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

#define MAX_OVERRIDES 32
typedef struct { char key[96]; long code; } override_t;
typedef struct {
    char name[96], uuid[96], driver_version[80], nvml_version[80];
    long device_count, init_ret, gpu_lost, delay_ms, counter_epoch, energy_update_ms, temperature_c, sm_clock_mhz, mem_clock_mhz,
        util_gpu, util_mem, limit_enforced_mw, limit_mgmt_mw, limit_default_mw, power_mw, power_avg_mw, power_usage_mw,
        limit_min_mw, limit_max_mw, root, max_sm_clock_mhz, min_sm_clock_mhz, sm_clock_step_mhz,
        follow_limits, idle_power_mw;
    unsigned long long energy_start_mj, mem_total, mem_reserved, mem_used, clock_events;
    char dev_name[8][96], dev_uuid[8][96], dev_bus[8][32];  /* per device; empty = the default above */
    override_t over[MAX_OVERRIDES];  /* "fail.<fn>" and "field.<id>" */
    int n_over;
} script_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static script_t S;
static int loaded, init_count;
static char loaded_path[4096];
static struct stat loaded_st;
static unsigned long long base_mj;      /* the counter when it last started (energy_start_mj, or 0 after a reset) */
static double acc_mj;                   /* energy integrated since then (mJ) */
static unsigned long long published_mj; /* the counter value the driver currently shows */
static int64_t last_ns, published_ns;
static struct shim_device devices[8];

static int64_t now_ns(clockid_t c) { struct timespec t; clock_gettime(c, &t); return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec; }

static void defaults(script_t *s) {
    memset(s, 0, sizeof *s);
    strcpy(s->name, "NVML shim GPU"); strcpy(s->uuid, "GPU-00000000-5h1m-0000-0000-000000000000");
    strcpy(s->driver_version, "shim"); strcpy(s->nvml_version, "shim");
    s->device_count = 1; s->power_mw = 70000; s->power_avg_mw = -1; s->power_usage_mw = -1;
    s->energy_start_mj = 1000000; s->temperature_c = 45; s->sm_clock_mhz = 1980; s->mem_clock_mhz = 2619;
    s->util_gpu = 0; s->util_mem = 0; s->mem_total = 8ULL << 30; s->mem_reserved = 256ULL << 20; s->mem_used = 1ULL << 30;
    s->limit_enforced_mw = s->limit_mgmt_mw = s->limit_default_mw = 700000;
    s->limit_min_mw = 100000; s->limit_max_mw = 700000; s->root = 1;
    s->max_sm_clock_mhz = 1980; s->min_sm_clock_mhz = 345; s->sm_clock_step_mhz = 15; s->idle_power_mw = 70000;
}

static char *trim(char *t) {
    while (*t == ' ' || *t == '\t') t++;
    char *e = t + strlen(t);
    while (e > t && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
    return t;
}

static void set_key(script_t *s, const char *k, const char *v) {
    long n = strtol(v, NULL, 0);
    unsigned long long u = strtoull(v, NULL, 0);
#define STR(f) if (!strcmp(k, #f)) { snprintf(s->f, sizeof s->f, "%s", v); return; }
#define NUM(f) if (!strcmp(k, #f)) { s->f = n; return; }
#define U64(f) if (!strcmp(k, #f)) { s->f = u; return; }
    STR(name) STR(uuid) STR(driver_version) STR(nvml_version)
    NUM(device_count) NUM(init_ret) NUM(gpu_lost) NUM(delay_ms) NUM(counter_epoch) NUM(energy_update_ms) NUM(temperature_c)
    NUM(sm_clock_mhz) NUM(mem_clock_mhz) NUM(util_gpu) NUM(util_mem) NUM(limit_enforced_mw) NUM(limit_mgmt_mw)
    NUM(limit_default_mw) NUM(power_mw) NUM(power_avg_mw) NUM(power_usage_mw) NUM(limit_min_mw) NUM(limit_max_mw) NUM(root)
    NUM(max_sm_clock_mhz) NUM(min_sm_clock_mhz) NUM(sm_clock_step_mhz) NUM(follow_limits) NUM(idle_power_mw)
    U64(energy_start_mj) U64(mem_total) U64(mem_reserved) U64(mem_used) U64(clock_events)
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof key, "name.%d", i); if (!strcmp(k, key)) { snprintf(s->dev_name[i], sizeof s->dev_name[i], "%s", v); return; }
        snprintf(key, sizeof key, "uuid.%d", i); if (!strcmp(k, key)) { snprintf(s->dev_uuid[i], sizeof s->dev_uuid[i], "%s", v); return; }
        snprintf(key, sizeof key, "pci_bus_id.%d", i); if (!strcmp(k, key)) { snprintf(s->dev_bus[i], sizeof s->dev_bus[i], "%s", v); return; }
    }
    if ((!strncmp(k, "fail.", 5) || !strncmp(k, "field.", 6)) && s->n_over < MAX_OVERRIDES) {
        snprintf(s->over[s->n_over].key, sizeof s->over[0].key, "%s", k);
        s->over[s->n_over++].code = n;
        return;
    }
    fprintf(stderr, "nvml shim: unknown script key '%s' (ignored)\n", k);
}

static long power_now_mw(void);

/* Integrate power up to now, then re-read the script if it is new or changed. Called with the lock held. */
static void refresh(void) {
    int64_t t = now_ns(CLOCK_MONOTONIC);
    if (loaded) acc_mj += (double)power_now_mw() * (double)(t - last_ns) / 1e9;  /* mW x s = mJ */
    last_ns = t;
    const char *path = getenv("NVML_SHIM_SCRIPT");
    struct stat st;
    if (!path || stat(path, &st) != 0) {  /* no script: no driver (the next script starts afresh) */
        loaded = 0;
        loaded_path[0] = 0;
        return;
    }
    int same_path = loaded && !strcmp(path, loaded_path);
    if (same_path && st.st_ino == loaded_st.st_ino && st.st_size == loaded_st.st_size &&
        st.st_mtim.tv_sec == loaded_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_st.st_mtim.tv_nsec) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    script_t s;
    defaults(&s);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#'), *eq;
        if (hash) *hash = 0;
        if (!(eq = strchr(line, '='))) continue;
        *eq = 0;
        set_key(&s, trim(line), trim(eq + 1));
    }
    fclose(f);
    if (s.device_count < 0 || s.device_count > (long)(sizeof devices / sizeof devices[0]))
        s.device_count = (long)(sizeof devices / sizeof devices[0]);
    if (!same_path) {  /* a new script: a fresh counter at energy_start_mj */
        base_mj = s.energy_start_mj; acc_mj = 0; published_mj = base_mj; published_ns = t;
    } else if (s.counter_epoch != S.counter_epoch) {  /* a new epoch: the counter restarts at 0 (driver reload) */
        base_mj = 0; acc_mj = 0; published_mj = 0; published_ns = t;
    }
    S = s;
    snprintf(loaded_path, sizeof loaded_path, "%s", path);
    loaded_st = st;
    loaded = 1;
}

static long override_code(const char *prefix, const char *what) {
    char key[96];
    snprintf(key, sizeof key, "%s%s", prefix, what);
    for (int i = 0; i < S.n_over; i++)
        if (!strcmp(S.over[i].key, key)) return S.over[i].code;
    return NVML_SUCCESS;
}

/* Calls per entry point, for tests ("not asked again"); read with nvmlShimCallCount (not an NVML function). */
#define MAX_COUNTED 64
static struct { const char *fn; unsigned long n; } calls[MAX_COUNTED];
static void count_call(const char *fn) {
    for (int i = 0; i < MAX_COUNTED; i++) {
        if (!calls[i].fn) calls[i].fn = fn;
        if (calls[i].fn == fn || !strcmp(calls[i].fn, fn)) { calls[i].n++; return; }
    }
}
unsigned long nvmlShimCallCount(const char *fn) {
    unsigned long n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_COUNTED && calls[i].fn; i++)
        if (!strcmp(calls[i].fn, fn)) n = calls[i].n;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Entry of every device call: lock, count, refresh, and the failure the script asks for (or NVML_SUCCESS). */
static nvmlReturn_t enter(const char *fn, nvmlDevice_t dev) {
    pthread_mutex_lock(&lock);
    count_call(fn);
    refresh();
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (S.delay_ms > 0) {
        struct timespec d = {S.delay_ms / 1000, (S.delay_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    if (dev && (dev < devices || dev >= devices + S.device_count)) return NVML_ERROR_INVALID_ARGUMENT;
    if (dev && S.gpu_lost) return NVML_ERROR_GPU_IS_LOST;
    return (nvmlReturn_t)override_code("fail.", fn);
}
#define ENTER(dev) nvmlReturn_t rc_ = enter(__func__, dev); if (rc_ != NVML_SUCCESS) { pthread_mutex_unlock(&lock); return rc_; }
#define LEAVE(v) do { pthread_mutex_unlock(&lock); return (v); } while (0)
#define CHECK_PTR(p) if (!(p)) LEAVE(NVML_ERROR_INVALID_ARGUMENT)

static unsigned long long counter_mj(void) {
    int64_t t = last_ns;
    if (S.energy_update_ms <= 0 || t - published_ns >= S.energy_update_ms * 1000000LL) {
        published_mj = base_mj + (unsigned long long)acc_mj;
        if (S.energy_update_ms > 0) published_ns += (t - published_ns) / (S.energy_update_ms * 1000000LL) * S.energy_update_ms * 1000000LL;
    }
    return published_mj;
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ---- initialisation ---------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = !loaded ? NVML_ERROR_DRIVER_NOT_LOADED : (nvmlReturn_t)S.init_ret;
    if (rc == NVML_SUCCESS) init_count++;
    LEAVE(rc);
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = init_count ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count) init_count--;
    LEAVE(rc);
}
const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* State persisted beside the script ("<script>.<ext>"), as the driver keeps it across processes. */
static int state_path(char *p, size_t n, const char *ext) {
    const char *script = getenv("NVML_SHIM_SCRIPT");
    if (!script) return 0;
    snprintf(p, n, "%s.%s", script, ext);
    return 1;
}
static int read_state(const char *ext, long *a, long *b) {
    char p[4200];
    if (!state_path(p, sizeof p, ext)) return 0;
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    int n = fscanf(f, "%ld %ld", a, b);
    fclose(f);
    return n;
}
static nvmlReturn_t write_state(const char *ext, long a, long b) {
    char p[4200], tmp[4210];
    if (!state_path(p, sizeof p, ext)) return NVML_ERROR_UNKNOWN;
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f) return NVML_ERROR_UNKNOWN;
    fprintf(f, "%ld %ld\n", a, b);
    fclose(f);
    return rename(tmp, p) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
/* The limit persisted by nvmlDeviceSetPowerManagementLimit, or -1 when none was set. */
static long set_limit_mw(void) { long v = -1, unused = 0; return read_state("limit", &v, &unused) >= 1 ? v : -1; }
/* The locked SM clock maximum (MHz) set by nvmlDeviceSetGpuLockedClocks, or -1 when clocks are not locked. */
static long locked_max_mhz(void) { long lo = -1, hi = -1; return read_state("clocks", &lo, &hi) == 2 ? hi : -1; }
static long power_now_mw(void) {
    if (!S.follow_limits) return S.power_mw;
    double p = (double)S.power_mw, idle = (double)S.idle_power_mw;
    long hi = locked_max_mhz();
    if (hi > 0 && hi < S.max_sm_clock_mhz && p > idle) { double f = (double)hi / (double)S.max_sm_clock_mhz; p = idle + (p - idle) * f * f; }
    long lim = set_limit_mw();
    if (lim < 0) lim = S.limit_enforced_mw;
    return (long)(p < (double)lim ? p : (double)lim);
}

/* ---- system and device ------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) { ENTER(NULL); LEAVE(copy_str(v, len, S.driver_version)); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) { ENTER(NULL); LEAVE(copy_str(v, len, S.nvml_version)); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { ENTER(NULL); CHECK_PTR(n); *n = (unsigned int)S.device_count; LEAVE(NVML_SUCCESS); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev) {
    ENTER(NULL);
    CHECK_PTR(dev);
    if (i >= (unsigned int)S.device_count) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (S.gpu_lost) LEAVE(NVML_ERROR_GPU_IS_LOST);
    devices[i].index = i;
    *dev = &devices[i];
    LEAVE(NVML_SUCCESS);
}
static const char *dev_name(unsigned int i) { return S.dev_name[i][0] ? S.dev_name[i] : S.name; }
static const char *dev_uuid(unsigned int i) {
    static char derived[8][96];
    if (S.dev_uuid[i][0]) return S.dev_uuid[i];
    if (i == 0) return S.uuid;
    snprintf(derived[i], sizeof derived[i], "%s", S.uuid);
    size_t n = strlen(derived[i]);
    if (n) derived[i][n - 1] = (char)('0' + i);
    return derived[i];
}
static const char *dev_bus(unsigned int i) {
    static char derived[8][32];
    if (S.dev_bus[i][0]) return S.dev_bus[i];
    snprintf(derived[i], sizeof derived[i], "00000000:%02X:00.0", i + 1);
    return derived[i];
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *v, unsigned int len) { ENTER(d); LEAVE(copy_str(v, len, dev_name(d->index))); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *v, unsigned int len) { ENTER(d); LEAVE(copy_str(v, len, dev_uuid(d->index))); }
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    ENTER(NULL);
    CHECK_PTR(uuid); CHECK_PTR(dev);
    if (S.gpu_lost) LEAVE(NVML_ERROR_GPU_IS_LOST);
    for (unsigned int i = 0; i < (unsigned int)S.device_count; i++)
        if (!strcmp(uuid, dev_uuid(i))) { devices[i].index = i; *dev = &devices[i]; LEAVE(NVML_SUCCESS); }
    LEAVE(NVML_ERROR_NOT_FOUND);
}
typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    ENTER(d);
    CHECK_PTR(p);
    memset(p, 0, sizeof *p);
    const char *bus = dev_bus(d->index);
    snprintf(p->busId, sizeof p->busId, "%s", bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", bus + (strlen(bus) > 12 ? 4 : 0));
    unsigned int dom = 0, b = 0, dv = 0;
    if (sscanf(bus, "%x:%x:%x", &dom, &b, &dv) == 3) { p->domain = dom; p->bus = b; p->device = dv; }
    p->pciDeviceId = 0x233510DE;
    LEAVE(NVML_SUCCESS);
}

/* ---- power and energy -------------------------------------------------------------------------------------- */
static long avg_mw(void) { return S.power_avg_mw >= 0 ? S.power_avg_mw : power_now_mw(); }
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    ENTER(d); CHECK_PTR(mj); *mj = counter_mj(); LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    ENTER(d); CHECK_PTR(mw); *mw = (unsigned int)(S.power_usage_mw >= 0 ? S.power_usage_mw : avg_mw()); LEAVE(NVML_SUCCESS);
}
#ifndef OMIT_nvmlDeviceGetFieldValues
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    ENTER(d);
    CHECK_PTR(values);
    long long ts_us = now_ns(CLOCK_REALTIME) / 1000;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        char id[16];
        snprintf(id, sizeof id, "%u", v->fieldId);
        v->timestamp = ts_us;
        v->latencyUsec = 0;
        v->nvmlReturn = (nvmlReturn_t)override_code("field.", id);
        int power = v->fieldId == FI_POWER_INSTANT || v->fieldId == FI_POWER_AVERAGE;
        if (v->nvmlReturn == NVML_SUCCESS && ((!power && v->fieldId != FI_ENERGY) || (power && v->scopeId != SCOPE_GPU)))
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (v->nvmlReturn != NVML_SUCCESS) continue;
        if (v->fieldId == FI_ENERGY) { v->valueType = VT_UNSIGNED_LONG_LONG; v->value.ullVal = counter_mj(); continue; }
        v->valueType = VT_UNSIGNED_INT;
        v->value.uiVal = (unsigned int)(v->fieldId == FI_POWER_INSTANT ? power_now_mw() : avg_mw());
    }
    LEAVE(NVML_SUCCESS);
}
#endif
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER(d); CHECK_PTR(mw); long v = set_limit_mw(); *mw = (unsigned int)(v >= 0 ? v : S.limit_enforced_mw); LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER(d); CHECK_PTR(mw); long v = set_limit_mw(); *mw = (unsigned int)(v >= 0 ? v : S.limit_mgmt_mw); LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *min_mw, unsigned int *max_mw) {
    ENTER(d); CHECK_PTR(min_mw); CHECK_PTR(max_mw);
    *min_mw = (unsigned int)S.limit_min_mw; *max_mw = (unsigned int)S.limit_max_mw; LEAVE(NVML_SUCCESS);
}
/* Root only (NVML_ERROR_NO_PERMISSION otherwise); a value outside the constraints is NVML_ERROR_INVALID_ARGUMENT. */
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t d, unsigned int mw) {
    ENTER(d);
    if (!S.root) LEAVE(NVML_ERROR_NO_PERMISSION);
    if ((long)mw < S.limit_min_mw || (long)mw > S.limit_max_mw) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    LEAVE(write_state("limit", (long)mw, 0));
}
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *mw) { ENTER(d); CHECK_PTR(mw); *mw = (unsigned int)S.limit_default_mw; LEAVE(NVML_SUCCESS); }

/* ---- thermals, clocks, utilization, memory ----------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
    ENTER(d); CHECK_PTR(c); if (sensor != 0) LEAVE(NVML_ERROR_NOT_SUPPORTED); *c = (unsigned int)S.temperature_c; LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER(d);
    CHECK_PTR(mhz);
    long hi = locked_max_mhz();
    if (type == 1) *mhz = (unsigned int)(hi > 0 && hi < S.sm_clock_mhz ? hi : S.sm_clock_mhz);  /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = (unsigned int)S.mem_clock_mhz;  /* NVML_CLOCK_MEM */
    else LEAVE(NVML_ERROR_NOT_SUPPORTED);
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    ENTER(d); CHECK_PTR(u); u->gpu = (unsigned int)S.util_gpu; u->memory = (unsigned int)S.util_mem; LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {  /* v1: used includes reserved memory */
    ENTER(d);
    CHECK_PTR(m);
    m->total = S.mem_total; m->used = S.mem_reserved + S.mem_used; m->free = S.mem_total - m->used;
    LEAVE(NVML_SUCCESS);
}
#ifndef OMIT_nvmlDeviceGetMemoryInfo_v2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER(d);
    CHECK_PTR(m);
    if (m->version != NVML_MEMORY_V2_VERSION) LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    m->total = S.mem_total; m->reserved = S.mem_reserved; m->used = S.mem_used; m->free = S.mem_total - S.mem_reserved - S.mem_used;
    LEAVE(NVML_SUCCESS);
}
#endif
#ifndef OMIT_nvmlDeviceGetCurrentClocksEventReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *mask) {
    ENTER(d); CHECK_PTR(mask); *mask = S.clock_events; LEAVE(NVML_SUCCESS);
}
#endif
#ifndef OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *mask) {  /* deprecated name */
    ENTER(d); CHECK_PTR(mask); *mask = S.clock_events; LEAVE(NVML_SUCCESS);
}
#endif

/* ---- clocks: supported, max, locked (nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks) -------- */
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER(d);
    CHECK_PTR(mhz);
    if (type == 0 || type == 1) *mhz = (unsigned int)S.max_sm_clock_mhz;  /* NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM */
    else if (type == 2) *mhz = (unsigned int)S.mem_clock_mhz;
    else LEAVE(NVML_ERROR_NOT_SUPPORTED);
    LEAVE(NVML_SUCCESS);
}
/* nvml.h's size protocol: a too-small array answers NVML_ERROR_INSUFFICIENT_SIZE with the count needed. */
static nvmlReturn_t fill_list(unsigned int *count, unsigned int *out, const long *vals, unsigned int n) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!out || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned int i = 0; i < n; i++) out[i] = (unsigned int)vals[i];
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t d, unsigned int *count, unsigned int *clocks) {
    ENTER(d);
    long v = S.mem_clock_mhz;
    LEAVE(fill_list(count, clocks, &v, 1));
}
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t d, unsigned int mem, unsigned int *count, unsigned int *clocks) {
    ENTER(d);
    if ((long)mem != S.mem_clock_mhz) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    static long vals[512];
    unsigned int n = 0;
    long step = S.sm_clock_step_mhz > 0 ? S.sm_clock_step_mhz : 15;
    for (long c = S.max_sm_clock_mhz; c >= S.min_sm_clock_mhz && n < 512; c -= step) vals[n++] = c;
    LEAVE(fill_list(count, clocks, vals, n));
}
/* Root only; a range outside [min, max] supported or min > max is NVML_ERROR_INVALID_ARGUMENT. */
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t d, unsigned int lo, unsigned int hi) {
    ENTER(d);
    if (!S.root) LEAVE(NVML_ERROR_NO_PERMISSION);
    if (lo > hi || (long)hi > S.max_sm_clock_mhz || (long)lo < S.min_sm_clock_mhz) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    LEAVE(write_state("clocks", (long)lo, (long)hi));
}
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t d) {
    ENTER(d);
    if (!S.root) LEAVE(NVML_ERROR_NO_PERMISSION);
    char p[4200];
    if (state_path(p, sizeof p, "clocks")) remove(p);
    LEAVE(NVML_SUCCESS);
}

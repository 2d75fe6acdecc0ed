/*
 * jitcache's stable C ABI (C99): what Python (ctypes/cffi), Rust or any serving engine
 * links. It wraps the C++ runtime (jitcache/runtime.hpp): open a runtime on a cache
 * directory, prepare a checkpoint's kernels, query each layer's scale and bind, launch.
 *
 * Conventions
 *   - Every function that can fail returns a jitcache_status; JITCACHE_OK is 0. On
 *     failure, jitcache_last_error() on the same thread gives the message (naming file
 *     and field where known). Output parameters are written only on success.
 *   - No C++ exception ever crosses this boundary; an unexpected one becomes
 *     JITCACHE_ERROR_INTERNAL (or JITCACHE_ERROR_OUT_OF_MEMORY).
 *   - Input structs begin with `struct_size`; fill them with their *_init function so
 *     a program built against an older header keeps working with a newer library.
 *     Output structs have a fixed layout for JITCACHE_ABI_VERSION 1; a change to one is
 *     a new function, never a new meaning of an old one.
 *   - Strings returned by the library are NUL-terminated UTF-8 and owned by the library;
 *     each function says how long they stay valid.
 *   - Only `jitcache_*` symbols are exported by libjitcache.so.
 *
 * Handles, ownership and thread safety
 *   jitcache_runtime  Created by jitcache_runtime_open, closed by jitcache_runtime_close.
 *                     Any number of threads may call jitcache_prepare and the other
 *                     runtime functions on one runtime at the same time, and one may
 *                     close it meanwhile: the calls already inside run to their end
 *                     (close waits for them), a call that starts later fails with
 *                     JITCACHE_ERROR_INVALID_ARGUMENT ("runtime closed"). Closing twice
 *                     is harmless. A closed handle keeps a few bytes for the process's
 *                     life so that a late call finds it closed, not freed.
 *   jitcache_model    Created by jitcache_prepare, released by jitcache_model_release.
 *                     Immutable: every query and launch may be called from any thread
 *                     at the same time. A model holds what it needs (kernels, loaded
 *                     modules), so it stays valid after its runtime is closed. Release
 *                     follows the runtime's rule: it waits for the calls in flight on
 *                     the model, later calls fail with JITCACHE_ERROR_INVALID_ARGUMENT
 *                     ("model closed"), releasing twice is harmless.
 *   jitcache_kernel   Created by jitcache_compile or jitcache_lookup, owned by the
 *                     caller, released once; independent of the runtime.
 *
 * fork()
 *   A runtime belongs to the process that opened it. In a child made by fork(), every
 *   call on a runtime of the parent fails with JITCACHE_ERROR_INVALID_ARGUMENT ("runtime
 *   created in process P used in process C: a forked child must open its own Runtime"),
 *   and jitcache_runtime_close there only marks it closed: the parent's threads, locks
 *   and connections did not come along. The child opens its own runtime, which works,
 *   compiles included: fork() waits while another thread is inside NVRTC (pthread_atfork),
 *   so the child never inherits NVRTC's locks held. Models of the parent keep their host
 *   functions in the child; CUDA itself does not survive fork().
 */
#ifndef JITCACHE_JITCACHE_H
#define JITCACHE_JITCACHE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define JITCACHE_API __attribute__((visibility("default")))
#else
#define JITCACHE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header (it is also the library's SONAME
 * version: libjitcache.so.1). */
#define JITCACHE_ABI_VERSION 1

typedef enum jitcache_status {
  JITCACHE_OK = 0,
  JITCACHE_ERROR_INVALID_ARGUMENT = 1, /* a NULL handle or argument, a bad enum value, a bad
                                          layer, an option or launch argument out of range,
                                          a call refused inside a log callback */
  JITCACHE_ERROR_INVALID_INPUT = 2,    /* a file or value failed validation, the environment
                                          included (JITCACHE_STRICT, JITCACHE_LOG_LEVEL, an
                                          unknown JITCACHE_* variable in strict mode) */
  JITCACHE_ERROR_IO = 3,               /* the operating system refused a read or write */
  JITCACHE_ERROR_NOT_FOUND = 4,        /* a named thing that must exist does not */
  JITCACHE_ERROR_UNSAFE = 5,           /* refused for safety (symlink, owner, path escape) */
  JITCACHE_ERROR_COMPILE = 6,          /* the compiler rejected a kernel */
  JITCACHE_ERROR_DATABASE = 7,         /* the cache index is unusable */
  JITCACHE_ERROR_UNAVAILABLE = 8,      /* no GPU or driver (launches, target detection) */
  JITCACHE_ERROR_INTERNAL = 9,         /* a bug: an invariant did not hold */
  JITCACHE_ERROR_OUT_OF_MEMORY = 10
} jitcache_status;

typedef enum jitcache_device_use {
  JITCACHE_DEVICE_AUTO = 0, /* use the GPU when a driver and a device are present */
  JITCACHE_DEVICE_NONE = 1  /* never touch the driver: compile and cache only */
} jitcache_device_use;

typedef enum jitcache_cache_mode {
  JITCACHE_CACHE_READ_WRITE = 0, /* the cache directory: lookups and stores */
  JITCACHE_CACHE_READ_ONLY = 1,  /* a directory this process cannot write (a baked image):
                                    lookups only; misses compiled and kept in memory */
  JITCACHE_CACHE_MEMORY_ONLY = 2 /* no usable directory: everything compiled is kept in
                                    memory for the runtime's life, nothing persisted */
} jitcache_cache_mode;

typedef enum jitcache_cache_requirement {
  JITCACHE_CACHE_FROM_ENVIRONMENT = 0, /* JITCACHE_REQUIRE_CACHE decides (unset: optional);
                                          about the local directory, never the remote */
  JITCACHE_CACHE_OPTIONAL = 1,         /* an unusable directory: run memory-only, warn once */
  JITCACHE_CACHE_REQUIRED = 2          /* an unusable directory: open fails with its error */
} jitcache_cache_requirement;

typedef enum jitcache_rope {
  JITCACHE_ROPE_BF16 = 0, /* 432-byte records */
  JITCACHE_ROPE_FP8 = 1   /* 368-byte records */
} jitcache_rope;

/* The KV record the engine reads, one per layout (docs/record-formats.md). The first two
 * are the records of JITCACHE_ROPE_BF16 and JITCACHE_ROPE_FP8. */
typedef enum jitcache_record_format {
  JITCACHE_FORMAT_B12X_432 = 0,    /* b12x, bf16 RoPE: 432-byte records */
  JITCACHE_FORMAT_B12X_368 = 1,    /* b12x, fp8 RoPE: 368-byte records */
  JITCACHE_FORMAT_B12X_304 = 2,    /* b12x GLM_NEXT, no RoPE, per-token only: 304-byte records */
  JITCACHE_FORMAT_FLASHMLA_352 = 3, /* vLLM / FlashMLA nvfp4_ds_mla: 352-byte records */
  JITCACHE_FORMAT_FLASHINFER_GLM_416 = 4, /* FlashInfer GLM NVFP4 sparse MLA: 416-byte records */
  /* Page-major records (pages of 64 slots: every slot's data part, then every footer), one
     bf16 input row of 512 values per token (kv_c; k_pe unused), identity only: */
  JITCACHE_FORMAT_FLASHINFER_DSV4_384 = 5, /* FlashInfer DeepSeek-V4 NVFP4: 448 NoPE + 64 bf16 RoPE */
  JITCACHE_FORMAT_FLASHMLA_V41_288 = 6     /* DeepSeek-V4.1 V41_FP4: 512 dims, NaN-poisoned groups */
} jitcache_record_format;

/* Where the latent's outer scale comes from. */
typedef enum jitcache_latent_choice {
  JITCACHE_LATENT_PER_LAYER = 0, /* the layer's scale s_l: identity when it is 1.0, dynamic
                                    otherwise (the format's default; b12x-304 has no
                                    per-layer records and takes per-token) */
  JITCACHE_LATENT_PER_TOKEN = 1  /* each token's own scale s_t, kept in its record (b12x-368
                                    and b12x-304 only); the launch scale is exactly 1.0 */
} jitcache_latent_choice;

typedef enum jitcache_scale_mode {
  JITCACHE_SCALE_IDENTITY = 0, /* scale exactly 1.0: the kernel has no scale arithmetic */
  JITCACHE_SCALE_DYNAMIC = 1   /* the kernel applies the layer's scale */
} jitcache_scale_mode;

typedef enum jitcache_scale_source {
  JITCACHE_SOURCE_OVERRIDE = 0,         /* an override file (argument or environment) */
  JITCACHE_SOURCE_CHECKPOINT = 1,       /* the checkpoint's config.json metadata */
  JITCACHE_SOURCE_IDENTITY_DEFAULT = 2, /* no metadata anywhere: 1.0 */
  JITCACHE_SOURCE_DRAFT_IDENTITY = 3    /* a draft (MTP) layer: always 1.0 */
} jitcache_scale_source;

typedef enum jitcache_log_level {
  JITCACHE_LOG_DEBUG = 0,
  JITCACHE_LOG_INFO = 1,
  JITCACHE_LOG_WARNING = 2,
  JITCACHE_LOG_ERROR = 3,
  JITCACHE_LOG_OFF = 4
} jitcache_log_level;

typedef struct jitcache_runtime jitcache_runtime;
typedef struct jitcache_model jitcache_model;

/* ---- Library ------------------------------------------------------------------------ */

/* The library's version, e.g. "0.1.0". Static storage. Thread-safe. */
JITCACHE_API const char* jitcache_version(void);
/* JITCACHE_ABI_VERSION of the library actually loaded. Thread-safe. */
JITCACHE_API uint32_t jitcache_abi_version(void);
/* A fixed name for a status, e.g. "JITCACHE_ERROR_COMPILE". Static storage. */
JITCACHE_API const char* jitcache_status_name(jitcache_status status);

/* The message of the most recent failed call on this thread ("" if none has failed). A
 * successful call leaves it unchanged. The pointer stays valid until the next failing
 * call on this thread. Thread-safe (each thread has its own). */
JITCACHE_API const char* jitcache_last_error(void);

/* Receives every log line the library emits, with its level. `message` is valid only
 * during the call and holds `length` bytes plus a terminating NUL; it is one line: control
 * characters in it (a newline in a path, say) arrive escaped as \xNN. It may be called
 * from any thread, including the library's compile workers, and from several at once.
 *
 * Re-entrancy: a callback runs inside the library call that logged, which may be a
 * compile that other prepares wait for. jitcache_runtime_open and jitcache_prepare called
 * from inside a callback (on the thread running it) are refused with
 * JITCACHE_ERROR_INVALID_ARGUMENT, and jitcache_runtime_close does nothing there (the
 * runtime stays open; jitcache_last_error says why). Every other function may be called.
 * A callback must not wait for another thread that calls into the library. */
typedef void (*jitcache_log_fn)(void* user_data, jitcache_log_level level, const char* message,
                                size_t length);

/* Routes the library's log lines, process-wide, to `fn` with `user_data` (NULL restores
 * the default: stderr). Lines below `jitcache_set_log_level` are dropped first. A call
 * already in progress on another thread may still reach the previous callback; the
 * caller keeps `user_data` alive until it has replaced the callback. Thread-safe. */
JITCACHE_API jitcache_status jitcache_set_log_callback(jitcache_log_fn fn, void* user_data);
/* Process-wide threshold (default JITCACHE_LOG_INFO). Thread-safe. */
JITCACHE_API jitcache_status jitcache_set_log_level(jitcache_log_level level);

/* ---- Runtime ------------------------------------------------------------------------ */

/* Every field is range-checked by jitcache_runtime_open; a value out of range is
 * JITCACHE_ERROR_INVALID_ARGUMENT naming the field. */
typedef struct jitcache_runtime_options {
  size_t struct_size;         /* sizeof(jitcache_runtime_options); set by _init. A larger
                                 size (a newer header) is accepted up to 4096 when every
                                 byte this library does not know is zero. */
  const char* cache_dir;      /* NULL: JITCACHE_DIR, $XDG_CACHE_HOME/jitcache,
                                 ~/.cache/jitcache; "": JITCACHE_ERROR_INVALID_ARGUMENT
                                 naming cache_dir. Copied; need not outlive the call. */
  uint32_t jobs;              /* parallel compiles, 0 to 1024; 0: one per core */
  jitcache_device_use device; /* default JITCACHE_DEVICE_AUTO */
  int32_t device_ordinal;     /* 0 to 1023; default 0 */
  uint64_t cache_max_bytes;   /* 0: the store's default cap; else 16 MiB to 1 PiB */
  jitcache_cache_requirement cache_requirement; /* default JITCACHE_CACHE_FROM_ENVIRONMENT */
  const char* remote;         /* a shared remote cache, redis://[user[:password]@]host[:port][/db];
                                 NULL or "": JITCACHE_REMOTE (unset: none). Used only with a
                                 fleet key (JITCACHE_REMOTE_KEY_FILE). Never required: a
                                 remote configuration that cannot be used (a malformed URL,
                                 an unusable key or password file, a bad timeout) is one
                                 WARNING and no remote, whatever cache_requirement says.
                                 Copied; need not outlive the call. */
  double verify_spec;         /* shadow verification of jitcache_lookup hits: the fraction
                                 answered JITCACHE_LOOKUP_VERIFY, 0 to 1 (0 never, 1 always);
                                 negative (the _init default): JITCACHE_VERIFY_SPEC (unset: 0) */
  int32_t no_compile;         /* no-compile mode: 1 a kernel missing from every cache tier is
                                 JITCACHE_ERROR_UNAVAILABLE naming the variant and every tier it
                                 was looked up in, and nothing is compiled; 0 off; negative (the
                                 _init default): JITCACHE_NO_COMPILE (unset: off) */
  const char* providers;      /* cache providers (directories made by `jitcache pack`, such as
                                 installed cache wheels) separated by ':', asked after the
                                 local cache and before the remote, after those
                                 JITCACHE_PROVIDERS names; NULL or "": none besides those.
                                 A provider that is missing or fails its checks is a
                                 WARNING, never an error. Copied; need not outlive the call. */
} jitcache_runtime_options;

/* Fills `options` with the defaults and its struct_size. */
JITCACHE_API void jitcache_runtime_options_init(jitcache_runtime_options* options);

/* Opens (creating when needed) the cache directory and, with JITCACHE_DEVICE_AUTO,
 * loads the CUDA driver if there is one; a missing driver or device is not an error
 * (see jitcache_runtime_device). Nor is a cache directory that cannot be used (another
 * owner, group- or world-writable, a network filesystem, an unopenable index): the
 * runtime then runs memory-only and logs one WARNING naming the directory, the broken
 * rule and the fix (see jitcache_runtime_cache_status), unless options.cache_requirement
 * or the environment (JITCACHE_REQUIRE_CACHE=1) requires a cache, which makes it the
 * directory's error (for example JITCACHE_ERROR_UNSAFE). A directory this process cannot
 * write but that holds an index opens read-only, which satisfies the requirement. The
 * requirement is about the local directory only: the remote cache is never required.
 * `options` NULL means the defaults. On success *out owns a new runtime. The environment
 * is checked first: JITCACHE_STRICT or JITCACHE_REQUIRE_CACHE that is not a boolean (1,
 * true, yes, on, 0, false, no, off), and in strict mode an invalid JITCACHE_LOG_LEVEL or
 * an unknown JITCACHE_* variable, are JITCACHE_ERROR_INVALID_INPUT. */
JITCACHE_API jitcache_status jitcache_runtime_open(const jitcache_runtime_options* options,
                                                   jitcache_runtime** out);
/* Closes a runtime (NULL is a no-op): waits for the calls in flight on it to return, then
 * frees what it holds; later calls on it fail with JITCACHE_ERROR_INVALID_ARGUMENT. Models
 * prepared by it stay valid. Does nothing when called from inside a log callback (see
 * jitcache_log_fn), or in a forked child beyond marking it closed (see "fork()"). */
JITCACHE_API void jitcache_runtime_close(jitcache_runtime* runtime);

typedef struct jitcache_device_status {
  int32_t available;  /* 1: a device is usable; launches work */
  const char* reason; /* why not, when unavailable; "" otherwise */
  const char* name;   /* e.g. "NVIDIA H200"; "" without a device */
  const char* target; /* e.g. "sm_90a", "sm_120a"; "" without a device */
} jitcache_device_status;

/* The device found at open. The strings are owned by the runtime and stay valid after it
 * is closed; a closed runtime is JITCACHE_ERROR_INVALID_ARGUMENT. */
JITCACHE_API jitcache_status jitcache_runtime_device(const jitcache_runtime* runtime,
                                                     jitcache_device_status* out);
/* The cache directory in use (in memory-only mode: the one that was refused, or "").
 * Owned by the runtime; "" once it is closed. */
JITCACHE_API const char* jitcache_runtime_cache_dir(const jitcache_runtime* runtime);

typedef struct jitcache_cache_status {
  jitcache_cache_mode mode;
  const char* dir;    /* as jitcache_runtime_cache_dir */
  const char* reason; /* why not JITCACHE_CACHE_READ_WRITE (the broken rule); "" when it is */
} jitcache_cache_status;

/* How the runtime's cache is backed; decided at open. The strings are owned by the
 * runtime and stay valid after it is closed; a closed runtime is
 * JITCACHE_ERROR_INVALID_ARGUMENT. */
JITCACHE_API jitcache_status jitcache_runtime_cache_status(const jitcache_runtime* runtime,
                                                           jitcache_cache_status* out);

/* The figures of the runtime's cache as one JSON object, freed with jitcache_string_free
 * (see "Descriptions as JSON" below); docs/metrics.md explains them:
 *   "cache_dir", "mode" ("read-write" | "read-only" | "memory-only"),
 *   "session": what the runtime's cache did since the runtime opened, in this process only,
 *              under the names of `jitcache stats --json`: {"hits": {"memory", "disk"},
 *              "coalesced", "misses", "compiles", "compile_failures", "compile_ms":
 *              {"spent", "saved"}, "quarantined", "evicted", "remote": {...}, ...},
 *   "cache": {"entries", "bytes", "max_bytes"} of the cache directory now (every process's
 *            entries), or null: memory-only, or the index could not be read, when
 *            "cache_error" says why (this call still succeeds),
 *   "metrics": the same figures as Prometheus metric families: [{"name", "type" ("counter" |
 *              "gauge"), "help", "samples": [{"labels": {"cache_dir", "scope": "process",
 *              ...}, "value"}]}], counters in seconds where "session" has milliseconds.
 * Thread-safe; reads the index (one query), compiles nothing. A closed runtime is
 * JITCACHE_ERROR_INVALID_ARGUMENT. */
JITCACHE_API jitcache_status jitcache_runtime_stats(jitcache_runtime* runtime, char** out);

/* ---- Models ------------------------------------------------------------------------- */

/* Resolves the checkpoint's per-layer scales, gets every kernel variant the layers need
 * from the cache (compiling the misses in parallel, once per key across processes),
 * checks each artifact's embedded facts, and binds every layer.
 *   checkpoint       the directory holding config.json (NULL or "":
 *                    JITCACHE_ERROR_INVALID_ARGUMENT)
 *   rope             JITCACHE_ROPE_BF16 or JITCACHE_ROPE_FP8
 *   target           "sm_90", "sm_100a", "sm_120f", ...; with a device, one whose
 *                    cubin runs on it; NULL or "": the most specific target for the
 *                    device the cache holds, else compiles (docs/targets.md)
 *   scales_override  a v1 scales file that beats the checkpoint and
 *                    VLLM_NVFP4_MLA_SCALES_FILE; NULL, "" or whitespace only: none
 *                    (the rule VLLM_NVFP4_MLA_SCALES_FILE follows)
 * The strings are copied. On success *out owns a new model. */
JITCACHE_API jitcache_status jitcache_prepare(jitcache_runtime* runtime, const char* checkpoint,
                                              jitcache_rope rope, const char* target,
                                              const char* scales_override, jitcache_model** out);
/* Releases a model (NULL is a no-op), after the calls in flight on it have returned;
 * later calls on it fail with JITCACHE_ERROR_INVALID_ARGUMENT. */
JITCACHE_API void jitcache_model_release(jitcache_model* model);

/* Main layers plus draft (MTP) layers: 79 for GLM-5.x. */
JITCACHE_API jitcache_status jitcache_model_num_layers(const jitcache_model* model, int32_t* out);

typedef struct jitcache_layer_info {
  int32_t layer;
  float scale;                  /* the outer scale s_l the kernels apply */
  jitcache_scale_mode mode;
  jitcache_scale_source source;
} jitcache_layer_info;

/* One layer's binding. JITCACHE_ERROR_INVALID_ARGUMENT for a layer out of range. No
 * allocation, no lock. */
JITCACHE_API jitcache_status jitcache_model_layer(const jitcache_model* model, int32_t layer,
                                                  jitcache_layer_info* out);

typedef struct jitcache_prepare_stats {
  uint64_t variants; /* distinct kernel variants the layers need */
  uint64_t cached;   /* found in the cache */
  uint64_t compiled; /* compiled by this prepare */
  double wall_ms;    /* prepare's wall time */
} jitcache_prepare_stats;

JITCACHE_API jitcache_status jitcache_model_stats(const jitcache_model* model,
                                                  jitcache_prepare_stats* out);
/* The target the kernels were built for, e.g. "sm_90". Owned by the model. */
JITCACHE_API const char* jitcache_model_target(const jitcache_model* model);

/* ---- Launches ----------------------------------------------------------------------- */

/* Raw device addresses and row strides in elements; a stride of 0 means the dense
 * default. Checked before any device work, each failure JITCACHE_ERROR_INVALID_ARGUMENT
 * naming the field:
 *   - counts (num_tokens, num_rows, num_slots) are >= 0; num_tokens and num_rows are at
 *     most 8589934588 (2^31 - 1 blocks of 4 rows, one launch's grid);
 *   - each buffer that is read or written is non-zero and aligned for its type: kv_c,
 *     k_pe, cache and out 16 bytes; slot_mapping 8 (int64); slots 4 (int32); status,
 *     when not 0, 4 (uint32);
 *   - strides are at least the row width and multiples of 8 elements;
 *   - each buffer, from its base through its last row, fits in the 64-bit address space
 *     and spans less than 2^63 bytes (the kernels index with int64);
 *   - no buffer the kernel writes shares a byte with another buffer of the launch: the
 *     writer's cache and status with each other and with kv_c, k_pe and slot_mapping; the
 *     gather's out and status with each other and with cache and slots. Each buffer is
 *     taken from its base to the end of its last row, so a buffer inside the gaps of
 *     another's strided rows counts as overlapping. Buffers only read may overlap: kv_c
 *     and k_pe may be column slices of one [num_tokens, 576] tensor, slot_mapping may lie
 *     anywhere among them, and a gather's slots may lie inside the cache. The message
 *     names both buffers with their byte ranges.
 * Not checked, because slot_mapping is device memory: a writer launch maps each slot in
 * [0, num_slots) to at most one token (negative slots, padding, may repeat; so may slots
 * >= num_slots, which write nothing). A duplicate is a caller error that leaves that
 * slot's record undefined, not necessarily equal to either token's record. The host
 * executor below, which reads slot_mapping on the CPU, refuses it.
 * A count of 0 (num_tokens, num_rows) enqueues nothing and touches no buffer, so its
 * pointers may be 0; it returns JITCACHE_OK when the model's kernels are loaded, and
 * JITCACHE_ERROR_UNAVAILABLE without a GPU, like any launch. num_slots 0 makes every
 * slot out of range (the status bit, when a status word is given; a gather writes zero
 * rows) and the cache is not read. A status of 0 (no status word) means errors are not
 * reported; the kernels still skip what they would report. */
typedef struct jitcache_writer_launch {
  uint64_t kv_c;         /* bf16 [num_tokens, kv_c_stride >= 512] */
  int64_t kv_c_stride;   /* 0: 512 */
  uint64_t k_pe;         /* bf16 [num_tokens, k_pe_stride >= 64]; not read (may be 0) for
                            b12x-304, which has no RoPE */
  int64_t k_pe_stride;   /* 0: 64 */
  uint64_t slot_mapping; /* int64 [num_tokens]; a negative slot is skipped */
  int64_t num_tokens;
  uint64_t cache;        /* uint8 [num_slots, record bytes (jitcache_format_record_bytes)] */
  int64_t num_slots;
  uint64_t status;       /* optional uint32 error word the kernel ORs bits into; 0: none */
} jitcache_writer_launch;

typedef struct jitcache_gather_launch {
  uint64_t cache;      /* uint8 [num_slots, record bytes] */
  int64_t num_slots;
  uint64_t slots;      /* int32 [num_rows]; a negative slot gives a zero row */
  int64_t num_rows;
  uint64_t out;        /* bf16 [num_rows, out_stride >= row width]; the row width is 576,
                          512 for b12x-304 (no RoPE) */
  int64_t out_stride;  /* 0: the row width */
  uint64_t status;     /* optional uint32 error word; 0: none */
} jitcache_gather_launch;

/* Enqueue the layer's writer / gather with the layer's scale on `stream` (a CUstream;
 * NULL: the default stream). Asynchronous, like any CUDA launch.
 * JITCACHE_ERROR_INVALID_ARGUMENT for a bad layer or arguments (checked first, with or
 * without a GPU); then JITCACHE_ERROR_UNAVAILABLE without a GPU. */
JITCACHE_API jitcache_status jitcache_launch_writer(const jitcache_model* model, int32_t layer,
                                                    const jitcache_writer_launch* args,
                                                    void* stream);
JITCACHE_API jitcache_status jitcache_launch_gather(const jitcache_model* model, int32_t layer,
                                                    const jitcache_gather_launch* args,
                                                    void* stream);

/* ---- Prepare with options ------------------------------------------------------------ */

/* What jitcache_prepare takes, plus what was added later (the checkpoint's revision). Fill
 * it with jitcache_prepare_options_init; struct_size follows the rule of
 * jitcache_runtime_options. The strings are copied. */
typedef struct jitcache_prepare_options {
  size_t struct_size;          /* sizeof(jitcache_prepare_options); set by _init */
  const char* checkpoint;      /* as jitcache_prepare */
  jitcache_rope rope;          /* default JITCACHE_ROPE_BF16 */
  const char* target;          /* as jitcache_prepare */
  const char* scales_override; /* as jitcache_prepare */
  const char* revision;        /* the checkpoint's revision when the caller knows it (a
                                  Hugging Face commit); NULL or "": taken from a
                                  .../snapshots/<rev> directory name, else unknown. An
                                  override or sidecar recording another model_revision is
                                  refused (sidecar) or warned about (override). */
  /* Added with record formats; a caller whose struct_size ends before them gets the
   * defaults. */
  int32_t format;              /* a jitcache_record_format; -1 (the default): the record
                                  of `rope`. When set, `rope` is not read. */
  int32_t latent_scale;        /* a jitcache_latent_choice; default JITCACHE_LATENT_PER_LAYER.
                                  PER_TOKEN: every layer per-token, the checkpoint's scales
                                  are not applied; a format without per-token records is
                                  JITCACHE_ERROR_INVALID_ARGUMENT. */
} jitcache_prepare_options;

JITCACHE_API void jitcache_prepare_options_init(jitcache_prepare_options* options);
/* jitcache_prepare with options. */
JITCACHE_API jitcache_status jitcache_prepare_with(jitcache_runtime* runtime,
                                                   const jitcache_prepare_options* options,
                                                   jitcache_model** out);

/* ---- Descriptions as JSON ------------------------------------------------------------- */

/* Strings returned through a `char** out` below are allocated by the library; free each
 * with jitcache_string_free (NULL is a no-op). They are UTF-8 JSON documents whose keys
 * are only ever added to within an ABI version. */
JITCACHE_API void jitcache_string_free(char* text);

/* Everything prepare decided, as one JSON object:
 *   "target", "format" ("b12x-432" | "b12x-368" | "b12x-304" | "flashmla-352" |
 *             "flashinfer-glm-416"),
 *   "rope" ("bf16" | "fp8" for the first two formats, else null),
 *   "stats": {"variants", "cached", "compiled", "stored", "wall_ms"},
 *   "kernels": [{"kernel" ("writer" | "gather"), "latent_scale" ("identity" | "dynamic" |
 *                "per-token"), "format", "rope", "target", "key", "entry", "registers", "cubin_bytes",
 *                "compiled_now", "stored", "loaded", "ptx_fallback"}, ...],
 *   "scales": the document `jitcache scales show --json` prints (layers, provenance).
 * Thread-safe (the model is immutable). */
JITCACHE_API jitcache_status jitcache_model_describe(const jitcache_model* model, char** out);

/* Which cache tier holds each variant jitcache_prepare_with(runtime, options) would need,
 * without preparing: nothing is compiled, loaded, counted or copied between tiers. One JSON
 * object:
 *   "target", "format", "covered" (true when every variant is held by a tier),
 *   "missing" (how many are not),
 *   "variants": [{"label" ("writer/dynamic/b12x-432/sm_100a"), "kernel", "latent_scale",
 *                 "format", "target", "key", "tier" ("memory" | "local" | "provider" |
 *                 "remote", or null: no tier holds it), "tier_name" (the tier's own name,
 *                 or null), "layers" (the layers using it)}, ...].
 * The options' errors are jitcache_prepare_with's. */
JITCACHE_API jitcache_status jitcache_runtime_coverage(jitcache_runtime* runtime,
                                                       const jitcache_prepare_options* options,
                                                       char** out);

/* Resolves a checkpoint's per-layer scales without compiling anything: the same
 * precedence (scales_override, then VLLM_NVFP4_MLA_SCALES_FILE, then the checkpoint's
 * metadata, then 1.0), validation and logging as jitcache_prepare. `revision` as in
 * jitcache_prepare_options. *out is the document `jitcache scales show --json` prints. */
JITCACHE_API jitcache_status jitcache_resolve_scales(const char* checkpoint,
                                                     const char* scales_override,
                                                     const char* revision, char** out);

/* ---- Host executor -------------------------------------------------------------------- */

/* The kernels' own lane bodies run on the CPU, bit-identical to the device: what the
 * `jitcache kv` tools use, and a CPU implementation of the launches. The launch structs
 * are the device's, holding host addresses, with the same checks (a status word, when
 * given, is a host uint32 the run ORs its bits into). Synchronous; single-threaded.
 * A writer whose slot_mapping maps two tokens to one slot in [0, num_slots) is refused
 * before anything is written, with JITCACHE_ERROR_INVALID_ARGUMENT naming the slot and
 * both token indices (the first repeat in token order); the check takes O(num_tokens)
 * time and at most 32 bytes per token. */

/* bf16 bits from float32, rounded to nearest even, every NaN to 0x7FFF: how the kv tools
 * and a bf16 tensor hold a float32. `count` values; the arrays may not overlap. */
JITCACHE_API jitcache_status jitcache_host_bf16_from_float(const float* in, uint16_t* out,
                                                           size_t count);

/* A writer / gather with `scale`: identity exactly when scale is 1.0, dynamic otherwise.
 * The scale must be finite, > 0 and a normal float32 (as in a scales file). */
JITCACHE_API jitcache_status jitcache_host_write(float scale, jitcache_rope rope,
                                                 const jitcache_writer_launch* args);
JITCACHE_API jitcache_status jitcache_host_gather(float scale, jitcache_rope rope,
                                                  const jitcache_gather_launch* args);

/* A layer's writer / gather of a prepared model on the CPU: the layer's scale and the
 * variant its binding chose (never decided again from the value). Thread-safe. */
JITCACHE_API jitcache_status jitcache_model_host_write(const jitcache_model* model, int32_t layer,
                                                       const jitcache_writer_launch* args);
JITCACHE_API jitcache_status jitcache_model_host_gather(const jitcache_model* model, int32_t layer,
                                                        const jitcache_gather_launch* args);

/* Record bytes per token: 432 (JITCACHE_ROPE_BF16), 368 (JITCACHE_ROPE_FP8); 0 for
 * anything else. */
JITCACHE_API uint32_t jitcache_record_bytes(jitcache_rope rope);

/* jitcache_host_write / _gather for any record format (a jitcache_record_format) and
 * latent choice (a jitcache_latent_choice):
 *   - JITCACHE_LATENT_PER_LAYER: `scale` is the layer's s_l as above (identity exactly at
 *     1.0, dynamic otherwise); refused for a format the layer's mode does not exist for
 *     (b12x-304, and flashmla-352 and flashinfer-glm-416 have no per-token records).
 *   - JITCACHE_LATENT_PER_TOKEN: `scale` must be exactly 1.0 (the token's scale is in its
 *     record); b12x-368 and b12x-304 only.
 * b12x-304 has no RoPE: the writer reads no k_pe (it may be 0) and the gather's rows are
 * 512 values wide (out_stride 0 means 512, else at least 512). Other formats as above.
 * An unknown format or choice, or a combination the format has no records for, is
 * JITCACHE_ERROR_INVALID_ARGUMENT naming it. */
JITCACHE_API jitcache_status jitcache_host_write_format(float scale, int32_t format, int32_t latent,
                                                        const jitcache_writer_launch* args);
JITCACHE_API jitcache_status jitcache_host_gather_format(float scale, int32_t format, int32_t latent,
                                                         const jitcache_gather_launch* args);

/* Record bytes per token of a jitcache_record_format: 432, 368, 304, 352; 0 for anything
 * else. */
JITCACHE_API uint32_t jitcache_format_record_bytes(int32_t format);

/* ---- Kernels from outside --------------------------------------------------------------
 *
 * A kernel library compiles its own kernels through jitcache's cache (the C++ API is
 * jitcache/compile.hpp and Runtime::compile / lookup, whose comments say more). A family
 * is declared once per runtime: its source kind and its spec facts. A request then names
 * the family, the spec (every declared fact, each with an allowed value), the source, the
 * entry, the exact target and the options; the key holds all of them and the fingerprints
 * of every tool that touches the binary. A lookup by spec alone (before any source is
 * generated) is served only while the spec determines the source: each entry records the
 * source it was built from, and a request whose source differs for the same spec is
 * refused (JITCACHE_ERROR_INVALID_INPUT: the spec is incomplete) without serving anything.
 *
 * Statuses: an undeclared family JITCACHE_ERROR_NOT_FOUND; a missing, unknown or
 * out-of-range fact, another kind than the family's, or an unknown target
 * JITCACHE_ERROR_INVALID_ARGUMENT; an incomplete spec JITCACHE_ERROR_INVALID_INPUT; a tool
 * that refuses the source JITCACHE_ERROR_COMPILE (the message names the tool, the stage and
 * the target, and ends with the tool's full log); a tool that cannot be loaded
 * JITCACHE_ERROR_UNAVAILABLE. All are thread-safe on one runtime. No GPU is needed.
 *
 * NVRTC reads nothing from disk (docs/compile-api.md): the headers a CUDA source includes
 * are the request's named headers. Options that add include paths or pre-includes or
 * otherwise read or write files (-I, --include-path, -include, --pre-include, the pch
 * options, --time, ...), an #include / __has_include of an absolute name, of a name with a
 * '..' component or of a macro-computed name, a NUL byte in the source or a header, and a
 * header name given twice are JITCACHE_ERROR_INVALID_ARGUMENT naming the option or the
 * file and line; an include that is not a named header fails the compile naming it.
 *
 * The tools run in a child process (jitcache-tool-worker, beside the library, or
 * JITCACHE_TOOL_WORKER): a tool that exits, aborts, crashes or hangs (longer than
 * JITCACHE_TOOL_TIMEOUT_MS) fails the call with JITCACHE_ERROR_COMPILE naming the tool, the
 * stage and the exit status or signal, never ending the caller; a missing worker is
 * JITCACHE_ERROR_UNAVAILABLE. */

typedef enum jitcache_source_kind {
  JITCACHE_KIND_CUDA = 0, /* CUDA C++ (+ named headers) through NVRTC */
  JITCACHE_KIND_NVVM = 1, /* NVVM IR, text or bitcode, through libNVVM, then nvJitLink */
  JITCACHE_KIND_PTX = 2   /* PTX through nvJitLink */
} jitcache_source_kind;

typedef enum jitcache_lookup_outcome {
  JITCACHE_LOOKUP_HIT = 0,   /* the kernel, by spec alone */
  JITCACHE_LOOKUP_MISS = 1,  /* nothing cached: generate the source, call jitcache_compile */
  JITCACHE_LOOKUP_VERIFY = 2 /* cached, but chosen for shadow verification: generate the
                                source and call jitcache_compile, which checks it first */
} jitcache_lookup_outcome;

typedef struct jitcache_fact {
  const char* name;
  const char* value;
} jitcache_fact;

typedef struct jitcache_header {
  const char* name; /* the include name the source uses */
  const char* text;
  size_t size;      /* bytes of text */
} jitcache_header;

/* Fill with jitcache_compile_request_init; struct_size follows the rule of
 * jitcache_runtime_options. Everything is copied; nothing need outlive the call. */
typedef struct jitcache_compile_request {
  size_t struct_size;
  const char* family;
  const jitcache_fact* spec;
  size_t num_spec;
  jitcache_source_kind kind;
  const char* text;     /* the source; NVVM bitcode may hold NUL bytes */
  size_t text_size;     /* bytes of text */
  const jitcache_header* headers; /* cuda only */
  size_t num_headers;
  const char* entry;    /* the kernel's symbol */
  const char* target;   /* exact: "sm_90", "sm_100a", "sm_120a" */
  const char* const* options; /* for the tool that reads the source; no architecture option */
  size_t num_options;
} jitcache_compile_request;

/* A compiled kernel, owned by the caller: release it with jitcache_kernel_release. */
typedef struct jitcache_kernel jitcache_kernel;

JITCACHE_API void jitcache_compile_request_init(jitcache_compile_request* request);

/* Declares a family from a JSON object:
 *   {"family": "name", "kind": "cuda" | "nvvm" | "ptx",
 *    "facts": {"dtype": ["f16", "bf16"], "block": []}}
 * where [] allows any non-empty string. Family and fact names are 1 to 64 of
 * [A-Za-z0-9_.-]. A key given twice in one object (two "facts", or one fact twice) is
 * JITCACHE_ERROR_INVALID_ARGUMENT naming it. Declaring a family again with the same schema
 * is fine, with another one JITCACHE_ERROR_INVALID_ARGUMENT. */
JITCACHE_API jitcache_status jitcache_declare_family(jitcache_runtime* runtime, const char* schema_json);

/* The request's kernel, from the cache or compiled (once per key across processes). */
JITCACHE_API jitcache_status jitcache_compile(jitcache_runtime* runtime, const jitcache_compile_request* request,
                                              jitcache_kernel** out);

/* The kernel of a spec without its source. *outcome is always written on success; *out
 * is the kernel on JITCACHE_LOOKUP_HIT and NULL otherwise. */
JITCACHE_API jitcache_status jitcache_lookup(jitcache_runtime* runtime, const char* family,
                                             const jitcache_fact* spec, size_t num_spec, const char* target,
                                             jitcache_lookup_outcome* outcome, jitcache_kernel** out);

/* The cubin's bytes, valid until the kernel is released. Thread-safe. */
JITCACHE_API jitcache_status jitcache_kernel_cubin(const jitcache_kernel* kernel, const uint8_t** data,
                                                   size_t* size);

/* The rest as one JSON object: "family", "kind", "entry", "target", "key", "from_cache",
 * "from_remote", "verified", "ms", "cubin_bytes", "resources": {"registers",
 * "stack_frame_bytes", "spill_store_bytes", "spill_load_bytes"} (-1: not reported), "log". */
JITCACHE_API jitcache_status jitcache_kernel_describe(const jitcache_kernel* kernel, char** out);

/* NULL is a no-op. */
JITCACHE_API void jitcache_kernel_release(jitcache_kernel* kernel);

#ifdef __cplusplus
}
#endif

#endif /* JITCACHE_JITCACHE_H */

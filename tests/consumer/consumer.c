/* A C99 program that uses only the installed C ABI: opens a runtime without a device on
 * the cache directory given, prepares the checkpoint given for sm_90 with bf16 RoPE, and
 * prints what it got. Exits non-zero on any failure or unexpected answer.
 *   consumer CHECKPOINT_DIR CACHE_DIR */
#include <stdio.h>
#include <string.h>

#include <jitcache/jitcache.h>

static int g_log_lines = 0;

static void count_lines(void* user_data, jitcache_log_level level, const char* message, size_t length) {
  (void)level;
  if (user_data != &g_log_lines || strlen(message) != length) return;
  ++g_log_lines;
}

static int check(jitcache_status status, const char* what) {
  if (status == JITCACHE_OK) return 1;
  fprintf(stderr, "%s: %s: %s\n", what, jitcache_status_name(status), jitcache_last_error());
  return 0;
}

int main(int argc, char** argv) {
  jitcache_runtime_options options;
  jitcache_runtime* runtime = NULL;
  jitcache_model* model = NULL;
  jitcache_device_status device;
  jitcache_prepare_stats stats;
  jitcache_layer_info first, draft, unused;
  int32_t layers = 0;
  int ok = 0;

  if (argc != 3) {
    fprintf(stderr, "usage: consumer CHECKPOINT_DIR CACHE_DIR\n");
    return 2;
  }
  if (jitcache_abi_version() != JITCACHE_ABI_VERSION) {
    fprintf(stderr, "built for ABI %d, loaded %u\n", JITCACHE_ABI_VERSION, (unsigned)jitcache_abi_version());
    return 1;
  }
  printf("jitcache %s abi %u\n", jitcache_version(), (unsigned)jitcache_abi_version());
  if (!check(jitcache_set_log_callback(count_lines, &g_log_lines), "set_log_callback")) return 1;

  jitcache_runtime_options_init(&options);
  options.cache_dir = argv[2];
  options.device = JITCACHE_DEVICE_NONE;
  if (!check(jitcache_runtime_open(&options, &runtime), "runtime_open")) return 1;
  if (!check(jitcache_runtime_device(runtime, &device), "runtime_device")) goto done;
  printf("device available %d (%s)\n", (int)device.available, device.reason);
  if (device.available) goto done;

  if (!check(jitcache_prepare(runtime, argv[1], JITCACHE_ROPE_BF16, "sm_90", NULL, &model), "prepare")) goto done;
  if (!check(jitcache_model_num_layers(model, &layers), "model_num_layers")) goto done;
  if (!check(jitcache_model_stats(model, &stats), "model_stats")) goto done;
  if (!check(jitcache_model_layer(model, 0, &first), "model_layer 0")) goto done;
  if (!check(jitcache_model_layer(model, layers - 1, &draft), "model_layer last")) goto done;
  printf("target %s\n", jitcache_model_target(model));
  printf("layers %d\n", (int)layers);
  printf("variants %llu cached %llu compiled %llu wall_ms %.1f\n", (unsigned long long)stats.variants,
         (unsigned long long)stats.cached, (unsigned long long)stats.compiled, stats.wall_ms);
  printf("layer 0 scale %g mode %d source %d\n", (double)first.scale, (int)first.mode, (int)first.source);
  printf("layer %d scale %g mode %d source %d\n", (int)draft.layer, (double)draft.scale, (int)draft.mode,
         (int)draft.source);
  printf("log lines %d\n", g_log_lines);

  /* The answers a calibrated GLM-5.x-shaped checkpoint must give, and the errors it must
   * refuse with. */
  if (first.mode != JITCACHE_SCALE_DYNAMIC || first.source != JITCACHE_SOURCE_CHECKPOINT || first.scale == 1.0f)
    goto done;
  if (draft.mode != JITCACHE_SCALE_IDENTITY || draft.source != JITCACHE_SOURCE_DRAFT_IDENTITY || draft.scale != 1.0f)
    goto done;
  if (jitcache_model_layer(model, layers, &unused) != JITCACHE_ERROR_INVALID_ARGUMENT ||
      strstr(jitcache_last_error(), "no layer") == NULL)
    goto done;
  if (g_log_lines == 0) goto done;

  /* A kernel from outside: PTX through nvJitLink, then found by its spec alone. */
  {
    static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry noop() { ret; }\n";
    const jitcache_fact spec[1] = {{"variant", "noop"}};
    jitcache_compile_request request;
    jitcache_kernel* kernel = NULL;
    jitcache_kernel* found = NULL;
    jitcache_lookup_outcome outcome = JITCACHE_LOOKUP_MISS;
    const uint8_t* cubin = NULL;
    size_t cubin_size = 0;
    int same = 0;
    if (!check(jitcache_declare_family(runtime, "{\"family\": \"consumer\", \"kind\": \"ptx\", "
                                                "\"facts\": {\"variant\": []}}"),
               "declare_family"))
      goto done;
    jitcache_compile_request_init(&request);
    request.family = "consumer";
    request.spec = spec;
    request.num_spec = 1;
    request.kind = JITCACHE_KIND_PTX;
    request.text = ptx;
    request.text_size = sizeof ptx - 1;
    request.entry = "noop";
    request.target = "sm_90";
    if (!check(jitcache_compile(runtime, &request, &kernel), "compile")) goto done;
    if (!check(jitcache_kernel_cubin(kernel, &cubin, &cubin_size), "kernel_cubin")) goto done_kernel;
    if (!check(jitcache_lookup(runtime, "consumer", spec, 1, "sm_90", &outcome, &found), "lookup")) goto done_kernel;
    if (outcome == JITCACHE_LOOKUP_HIT && found != NULL) {
      const uint8_t* again = NULL;
      size_t again_size = 0;
      same = jitcache_kernel_cubin(found, &again, &again_size) == JITCACHE_OK && again_size == cubin_size &&
             memcmp(again, cubin, cubin_size) == 0;
    }
    printf("kernel from outside: %lu cubin bytes, lookup %s\n", (unsigned long)cubin_size,
           same ? "hit, same cubin" : "wrong");
  done_kernel:
    jitcache_kernel_release(found);
    jitcache_kernel_release(kernel);
    if (!same) goto done;
  }
  ok = 1;

done:
  jitcache_model_release(model);
  jitcache_runtime_close(runtime);
  check(jitcache_set_log_callback(NULL, NULL), "set_log_callback");
  if (!ok) fprintf(stderr, "consumer: unexpected answer\n");
  return ok ? 0 : 1;
}

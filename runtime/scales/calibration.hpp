// Calibration: from per-rank capture files to a v1 scales object, with the checks a
// checkpoint's scales deserve before they ship (`jitcache scales calibrate` wires this up).
//
// A capture file, `nvfp4_ds_mla_capture_v1`, one per tensor-parallel rank and run:
//
//   capture := { "format": "nvfp4_ds_mla_capture_v1",
//                "model": non-empty string, "model_revision": non-empty string,
//                "dataset": non-empty string,           (each at most 256 characters)
//                "context": int > 0, "tp": int >= 1, "rank": int in [0, tp),
//                "tokens": int > 0,                     tokens observed on this rank
//                "num_layers": int > 0, "latent_dim": int > 0,
//                "max_abs": [ number ] x num_layers }   each finite and >= 0
//   no other keys; strict JSON (scale_json.hpp); at most 1 MiB.
//
// The pipeline, each stage a value:
//   read_capture / parse_capture -> Capture
//   assemble_run (one complete run: same facts, ranks 0..tp-1 once each) -> CaptureRun
//   measure_agreement / check_agreement (per-layer relative spread across ranks)
//   calibrate (primary run, optional envelope run, headroom) -> Calibration
//   render_scale_file -> the bytes of the v1 file
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"

namespace jitcache::scales {

inline constexpr const char* k_capture_format_v1 = "nvfp4_ds_mla_capture_v1";
// Capture files hold one number per layer; a few KiB for real models.
inline constexpr std::size_t k_max_capture_file_bytes = 1 << 20;
inline constexpr double k_default_agreement_tolerance = 1e-3;
inline constexpr double k_default_headroom = 1.0;
inline constexpr const char* k_calibrate_tool_name = "jitcache scales calibrate";

// What every capture of one run has the same (assemble_run checks it), and so the run.
struct CaptureFacts {
  std::string model;
  std::string model_revision;
  std::string dataset;
  std::int64_t context = 0;
  int tp = 0;
  int num_layers = 0;
  int latent_dim = 0;
};

struct Capture : CaptureFacts {
  std::string file;    // as given; every message names it
  std::string sha256;  // of the exact bytes parsed
  // The file's identity when it was read from disk, so the same file given twice under two
  // spellings is caught; unset for captures parsed from text.
  std::optional<std::pair<dev_t, ino_t>> identity;
  int rank = 0;
  std::int64_t tokens = 0;
  std::vector<double> max_abs;
};

// Strict-parses and validates one capture. Every field problem is collected: the message
// names the first ("<file>: field 'max_abs[3]': must be finite and >= 0, got -1"), the
// detail lists all.
Result<Capture> parse_capture(std::string_view text, const std::string& file);
// Reads a regular file of at most k_max_capture_file_bytes and parses it; the name shown is
// the path as given.
Result<Capture> read_capture(const std::filesystem::path& path);

// One complete capture run: the facts its captures share, and the captures sorted by rank.
struct CaptureRun : CaptureFacts {
  std::vector<Capture> captures;  // captures[r].rank == r
};

// Checks that `captures` form one complete run: the same model, model_revision, dataset,
// context, num_layers, latent_dim and tp in every file, the ranks 0..tp-1 each exactly once,
// and no file given twice. `role` ("primary", "envelope") starts messages that name no file.
Result<CaptureRun> assemble_run(std::vector<Capture> captures, std::string_view role);

struct LayerSpread {
  int layer = 0;
  double spread = 0;              // (max - min) / max over ranks; 0 when all are 0
  std::vector<double> per_rank;   // max_abs[layer] of rank 0, 1, ...
};

struct Agreement {
  double tolerance = k_default_agreement_tolerance;
  double worst_spread = 0;
  int worst_layer = 0;                    // the first layer with the worst spread
  std::vector<LayerSpread> disagreeing;   // every layer with spread > tolerance
};

// Per-layer relative spread across the run's ranks.
Agreement measure_agreement(const CaptureRun& run, double tolerance);
// An error (invalid_input) naming every disagreeing layer with each rank's value.
Status check_agreement(const Agreement& agreement, const CaptureRun& run, std::string_view role);

// The per-layer maxima of a run: the largest value over its ranks.
std::vector<double> run_max_abs(const CaptureRun& run);

// What a checkpoint requires of the captures (see checkpoint_facts).
struct CheckpointFacts {
  std::string config_file;  // <checkpoint>/config.json, as messages name it
  int num_hidden_layers = 0;
  int kv_lora_rank = 0;
  std::optional<std::string> revision;  // known: given explicitly, else snapshots/<rev>
  std::string revision_origin;          // "given explicitly", "the snapshots/<revision> directory name"
};

// Reads <checkpoint_dir>/config.json (read_checkpoint_config) and the revision the
// checkpoint is known by: `explicit_revision` when given, else the Hugging Face snapshot
// directory name (snapshot_revision), else none.
Result<CheckpointFacts> checkpoint_facts(const std::filesystem::path& checkpoint_dir,
                                         const std::optional<std::string>& explicit_revision);

struct CalibrationOptions {
  double agreement_tolerance = k_default_agreement_tolerance;  // finite, >= 0
  double headroom = k_default_headroom;                        // finite, >= 1
  std::optional<CheckpointFacts> checkpoint;  // counts (and revision) checked first
  // A revision the primary captures must match when no checkpoint says one (`--revision`
  // without `--checkpoint`).
  std::optional<std::string> revision;
  std::string jitcache_version;  // recorded in the provenance
};

struct Calibration {
  CaptureRun primary;
  Agreement primary_agreement;
  std::optional<CaptureRun> envelope;
  std::optional<Agreement> envelope_agreement;
  int layers_raised = 0;  // layers where the envelope's maximum was strictly larger
  double headroom = k_default_headroom;
  std::vector<double> max_abs;  // final per-layer maxima (envelope and headroom applied)
  std::vector<double> scales;   // max_abs[i] / 2688
  std::vector<std::string> warnings;  // e.g. an envelope captured on another base
  nlohmann::ordered_json object;      // the v1 object, keys in the documented order
};

// Bad option values (a NaN headroom, a negative tolerance) are invalid_argument; every
// finding in the data is invalid_input. The object returned has passed
// validate_scale_object (and the checkpoint's counts, when given).
Result<Calibration> calibrate(std::vector<Capture> primary, std::vector<Capture> envelope,
                              const CalibrationOptions& options);

// The v1 file's bytes: pretty-printed with a 2-space indent and a trailing newline.
std::string render_scale_file(const nlohmann::ordered_json& object);

}  // namespace jitcache::scales

// A CLI test with its own copy of the example checkpoint, which a test may change or name
// as a command's output: m_ckpt, and m_sidecar, its outer-scales file.
#pragma once

#include <filesystem>

#include "cli_fixture.hpp"

namespace jitcache::testing {

class CliCheckpointTest : public CliCommandTest {
 protected:
  void SetUp() override {
    CliCommandTest::SetUp();
    m_ckpt = dir() / "ckpt";
    std::filesystem::copy(example_checkpoint(), m_ckpt, std::filesystem::copy_options::recursive);
    m_sidecar = m_ckpt / "nvfp4_ds_mla_outer_scales.json";
  }

  std::filesystem::path m_ckpt, m_sidecar;
};

}  // namespace jitcache::testing

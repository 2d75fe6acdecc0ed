// RemoteTier::probe_access: what `remote status` asks before it calls a remote usable. A
// server can answer PING and SCAN and still refuse what a node needs: an ACL user without
// the read commands, a read-only replica.
#include "remote/lease_protocol.hpp"
#include "remote/remote_tier.hpp"

namespace jitcache::remote {
namespace {

constexpr std::string_view k_probe_lifetime_ms = "10000";

Status status_of(const Result<Reply>& reply) {
  if (!reply) return std::unexpected(reply.error());
  return {};
}

}  // namespace

RemoteTier::Access RemoteTier::probe_access() {
  const std::string token = random_token();
  const std::string name = make_name(m_options.prefix, "probe", token);
  Access access;
  const auto written = m_client.command({"SET", name, token, "NX", "PX", k_probe_lifetime_ms});
  access.write = status_of(written);
  // The commands a node reads an entry with; what the probe name holds does not matter.
  if (auto got = read(name); !got) access.read = std::unexpected(std::move(got.error()));
  if (written && written->is_ok()) {
    const auto released = m_client.command({"EVAL", k_release_script, "1", name, token});
    access.remove = status_of(released);
    if (released && !(released->type == Reply::Type::integer && released->integer == 1))
      access.remove = make_error(ErrorCode::io, "remote cache " + m_client.display() + ": EVAL: the probe " + name +
                                                    " written a moment ago was not there to delete");
  }
  return access;
}

}  // namespace jitcache::remote

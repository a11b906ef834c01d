#include "comm/settings.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <utility>

#include "base/env_config.h"
#include "comm/flight_recorder.h"
#include "topo/gpus.h"
#include "topo/hosts.h"
#include "topo/hwloc_topology.h"
#include "topo/network_devices.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"
#include "tpf/launch_env.h"
#include "transport/shm_fabric.h"
#include "transport/ucx_network.h"

namespace tpf::detail {
namespace {

// 256 KiB: two slots per rank stay in L2, so peers read them cache to cache. Measured on the
// 2-core EPYC VM: broadcast of 8 MiB at 2 ranks is 5x faster than with 1 MiB slots (docs/).
constexpr size_t kDefaultSlotBytes = size_t{256} << 10;
constexpr size_t kMinSlotBytes = 4096;
// Far beyond any /dev/shm (whose size setup checks), small enough that the segment's size
// arithmetic cannot overflow.
constexpr size_t kMaxSlotBytes = size_t{1} << 40;
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(300);
// Joining waits for every rank to start; a launcher that lost one should not wait 5 minutes.
constexpr std::chrono::milliseconds kMaxSetupTimeout = std::chrono::seconds(120);
// The bound for naming a lost host: long against a beat's scheduling delay on a loaded
// machine (beats go five times as often), short against the default deadline.
constexpr std::chrono::milliseconds kDefaultHostLostAfter = std::chrono::seconds(10);

constexpr SettingInfo kCatalog[] = {
    {"TPF_TIMEOUT", "communicator", "default deadline of each operation, seconds"},
    {"TPF_SHM_BUFFER_BYTES", "communicator",
     "staging slot per rank in shared memory (two per rank)"},
    {"TPF_EAGER_MAX_BYTES", "communicator",
     "largest per-rank message of the eager path (its capacity; 0 turns it off)"},
    {"TPF_ALLREDUCE_ALGO", "communicator", "force one_shot or two_shot all-reduce"},
    {"TPF_SHM_STEP_US", "communicator", "cost model: one synchronized step, us"},
    {"TPF_SHM_EXCESS_STEP_US", "communicator",
     "cost model: step cost per rank beyond the cores, us"},
    {"TPF_SHM_COPY_GBPS", "communicator",
     "cost model: copy rate into / out of shared memory, GB/s"},
    {"TPF_SHM_REDUCE_GBPS", "communicator", "cost model: reduction read rate, GB/s"},
    {"TPF_ASYMMETRIC_FENCES", "communicator",
     "0 = full fences on both sides instead of membarrier"},
    {"TPF_JOB_ID", "communicator, launcher", "unique job name; names shared-memory segments"},
    {"TPF_CPUS", "communicator", "cores the job may use on this machine (set by tpf run)"},
    {"TPF_NODE_ID", "communicator",
     "this rank's host: ranks with one id share memory (default: derived from the boot id, "
     "network and IPC namespaces, /dev/shm and hostname)"},
    {"TPF_NET_TRANSPORTS", "communicator",
     "UCX transports between hosts (UCX_TLS syntax; default: all but shared memory)"},
    {"TPF_NET_PROTOCOL", "communicator",
     "how data crosses between hosts: tag (tagged messages), put (put + signal into registered "
     "slots) or auto (put where UCX has RDMA, else tag; the default)"},
    {"TPF_NET_CONNECT", "communicator",
     "which ranks on other hosts a rank connects to while a communicator is made: first (its "
     "rail and heartbeat peers; any other on its first transfer with it; the default) or all "
     "(every one, each checked with a first message: a network fault shows at creation)"},
    {"TPF_NET_ALGO", "communicator",
     "force one_shot, pipelined (between host leaders) or per_rail all_reduce and broadcast "
     "between hosts (per_rail is the default only where each rank has network devices of its "
     "own, UCX_NET_DEVICES), tree broadcast or halving_doubling all_reduce (the other keeps the "
     "cost model's choice); "
     "pipelined also keeps large reduce, all_gather, reduce_scatter, all_to_all, gather and "
     "scatter off the rails, per_rail puts them on"},
    {"UCX_NET_DEVICES", "communicator",
     "UCX's setting: the network devices this rank uses (default all); where each rank of a "
     "host names devices of its own, its rail has links of its own and large collectives cross "
     "per rail"},
    {"TPF_RAIL_DEVICES", "communicator",
     "DEVICE,DEVICE,...: local rank l (the launcher's) uses device l mod the count, in place of "
     "UCX_NET_DEVICES: a NIC per rail under torchrun, mpirun or srun (tpf run: --rail-devices); "
     "auto: each rank takes a device on its GPU's PCIe path (TPF_GPU), or next to its cores "
     "where it drives none (hwloc), the host's ranks spread over them"},
    {"TPF_GPU", "communicator",
     "this rank's GPU for TPF_RAIL_DEVICES=auto and tpf run --bind gpu: a PCI bus id, an index "
     "in PCI order, or none "
     "(default: CUDA device local rank mod the visible ones, through CUDA_VISIBLE_DEVICES)"},
    {"TPF_NET_CALL_US", "communicator", "cost model: a collective's fixed cost across hosts, us"},
    {"TPF_NET_STEP_US", "communicator", "cost model: one network round between hosts, us"},
    {"TPF_NET_MESSAGE_US", "communicator",
     "cost model: each further message a host leader sends or receives in a round, us (0 or "
     "more); decides whether the leaders exchange fingerprints and small data in one round or in "
     "log2(hosts) rounds"},
    {"TPF_NET_GBPS", "communicator",
     "cost model: each host's network link, GB/s per direction (default 12.5: 100 Gb/s); also "
     "sizes all_reduce's slices between hosts"},
    {"TPF_NET_REDUCE_GBPS", "communicator",
     "cost model: combining the hosts' partial results, GB/s"},
    {"TPF_HOST_LOST_S", "communicator",
     "seconds without a heartbeat after which a rank on another host is named stopped or "
     "unreachable, and that a rank on this host may stay stopped before a rank waiting on it "
     "(or tpf run, once no other rank runs) finds it lost; twice it, how long the job's store "
     "hears nothing from a rank making a communicator before taking it for lost"},
    {"TPF_NET_NOTICE_WAIT_S", "communicator",
     "seconds a rank whose peer's connection failed waits for another rank's failure notice "
     "that explains it (a bad buffer or a crash its host-mates saw) before naming the peer lost "
     "(default 0.5)"},
    {"TPF_FLIGHT_RECORDER_SIZE", "communicator", "records kept per communicator; 0 = off"},
    {"TPF_FLIGHT_RECORDER_DIR", "process", "directory for flight-recorder dumps (stderr)"},
    {"TPF_FLIGHT_RECORDER_STORE", "process",
     "1: flight-recorder dumps go to the job's store (set by tpf run --hosts)"},
    {"TPF_FLIGHT_RECORDER_SIGNAL", "process", "signal that dumps the records: USR1, USR2, off"},
    {"TPF_REDUCE_ISA", "process", "cap the reduce kernels' instruction set: scalar, avx2, avx512"},
    {"TPF_RANK", "launch environment", "this rank in the job (set by tpf run)"},
    {"TPF_WORLD_SIZE", "launch environment", "ranks in the job (set by tpf run)"},
    {"TPF_LOCAL_RANK", "launch environment", "this rank on its machine (set by tpf run)"},
    {"TPF_LOCAL_WORLD_SIZE", "launch environment", "ranks on this machine (set by tpf run)"},
    {"TPF_STORE_ADDR", "launch environment", "host:port of the rendezvous store (set by tpf run)"},
    {"TPF_JOB_SECRET", "launch environment", "secret the store checks (at least 16 characters)"},
    {"TPF_END_WITH_STORE", "launch environment",
     "1: the rank ends (SIGKILL) when its job's store closes: tpf run --hosts sets it for its "
     "ranks, which its end would not otherwise reach (0 keeps them; refused where rank 0 "
     "serves the store)"},
    {"TPF_RUN_GRACE_S", "launcher (tpf run)", "seconds the other ranks get to report a failure"},
    {"TPF_RUN_DUMP_WAIT_S", "launcher (tpf run)", "seconds to wait for flight-recorder dumps"},
};

// Collects values and their sources while settings are read.
class Reader {
 public:
  explicit Reader(std::vector<SettingReport>& report) : report_(report) {}

  template <typename T, typename Format>
  T take(const char* name, std::optional<T> from_env, T fallback, Format format,
         const char* fallback_source = "default") {
    const T value = from_env.value_or(fallback);
    report_.push_back({name, format(value), from_env ? name : fallback_source});
    return value;
  }

 private:
  std::vector<SettingReport>& report_;
};

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// A setting's value as a message quotes it: control characters escaped, and a long one cut (a
// TPF_NODE_ID of 5,000 characters was printed whole).
std::string quoted(const std::string& text) {
  constexpr size_t kShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= ' ' && c != 127) {
      out += static_cast<char>(c);
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += escaped;
  }
  if (text.size() <= kShown) return out + "'";
  return out + "...' (" + std::to_string(text.size()) + " characters)";
}

[[noreturn]] void malformed(const char* name, const std::string& text,
                            const std::string& expected) {
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + "=" + quoted(text) + " is not " + expected);
}

// A number up to 1e12, above zero or (zero_allowed) zero or above.
std::optional<double> env_number(const char* name, bool zero_allowed) {
  auto text = base::env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  const bool in_range = zero_allowed ? value >= 0 : value > 0;
  if (end == text->c_str() || *end != '\0' || !in_range || value > 1e12) {
    malformed(name, *text, zero_allowed ? "a number, 0 or more" : "a positive number");
  }
  return value;
}
std::optional<double> env_positive_number(const char* name) { return env_number(name, false); }
std::optional<double> env_nonnegative_number(const char* name) { return env_number(name, true); }

std::optional<int> env_count(const char* name, int max) {
  auto text = base::env_string(name);
  if (!text) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < 1 || value > max) {
    malformed(name, *text, "a whole number in [1, " + std::to_string(max) + "]");
  }
  return value;
}

std::optional<bool> env_switch(const char* name) {
  auto text = base::env_string(name);
  if (!text) return std::nullopt;
  if (*text == "0") return false;
  if (*text == "1") return true;
  malformed(name, *text, "0 or 1");
}

// A host key is exchanged as one line of text and shown in messages: printable, no spaces.
std::optional<std::string> env_node_id() {
  auto text = base::env_string("TPF_NODE_ID");
  if (!text) return std::nullopt;
  constexpr size_t kMaxLength = 128;
  const bool printable =
      std::all_of(text->begin(), text->end(), [](char c) { return c > ' ' && c < 127; });
  if (!printable || text->size() > kMaxLength) {
    malformed("TPF_NODE_ID", *text,
              "a host name of 1 to " + std::to_string(kMaxLength) +
                  " printable characters without spaces");
  }
  return text;
}

std::optional<coll::AllReduceAlgorithm> env_all_reduce_algorithm() {
  auto text = base::env_string("TPF_ALLREDUCE_ALGO");
  if (!text) return std::nullopt;
  if (auto algorithm = coll::parse_all_reduce_algorithm(*text)) return algorithm;
  throw Error(ErrorCode::invalid_argument,
              "TPF_ALLREDUCE_ALGO='" + *text + "': expected one_shot or two_shot");
}

std::optional<coll::NetworkAlgorithm> env_network_algorithm() {
  auto text = base::env_string("TPF_NET_ALGO");
  if (!text) return std::nullopt;
  if (auto algorithm = coll::parse_network_algorithm(*text)) return algorithm;
  throw Error(ErrorCode::invalid_argument,
              "TPF_NET_ALGO='" + *text +
                  "': expected one_shot, pipelined, per_rail, tree or halving_doubling");
}

std::optional<transport::NetProtocol> env_net_protocol() {
  auto text = base::env_string("TPF_NET_PROTOCOL");
  if (!text) return std::nullopt;
  if (auto protocol = transport::parse_net_protocol(*text)) return protocol;
  throw Error(ErrorCode::invalid_argument,
              "TPF_NET_PROTOCOL='" + *text + "': expected tag, put or auto");
}

std::optional<bool> env_net_connect_all() {
  auto text = base::env_string("TPF_NET_CONNECT");
  if (!text) return std::nullopt;
  if (*text == "first") return false;
  if (*text == "all") return true;
  throw Error(ErrorCode::invalid_argument,
              "TPF_NET_CONNECT='" + *text + "': expected first or all");
}

std::optional<size_t> env_flight_recorder_size() {
  auto text = base::env_string("TPF_FLIGHT_RECORDER_SIZE");
  if (!text) return std::nullopt;
  size_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() ||
      value > FlightRecorder::kMaxCapacity) {
    throw Error(ErrorCode::invalid_argument,
                "TPF_FLIGHT_RECORDER_SIZE='" + *text + "' is not a number of records in [0, " +
                    std::to_string(FlightRecorder::kMaxCapacity) +
                    "] (records kept per communicator; 0 turns the flight recorder off)");
  }
  return value;
}

// TPF_RAIL_DEVICES: this rank's device, by the local rank its launcher gave it (tpf run, torchrun,
// mpirun, srun: bootstrap/launch_env.cc).
// `devices`: `list` parsed.
std::string rail_device_of_this_rank(const std::string& list,
                                     const std::vector<std::string>& devices) {
  if (!launch_env_present()) {
    throw Error(ErrorCode::invalid_argument,
                "TPF_RAIL_DEVICES='" + list +
                    "' gives local rank l the device of rail l, but no launcher says this "
                    "rank's local rank (TPF_LOCAL_RANK, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or "
                    "SLURM_LOCALID); set UCX_NET_DEVICES for each rank instead");
  }
  return topo::rail_device(devices, detect_launch_env().local_rank);
}

// TPF_RAIL_DEVICES=auto: the devices on this rank's GPU's PCIe path where it drives one
// (topo/gpus.h), else those next to its cores; and what they are nearest, for the report.
std::pair<std::vector<std::string>, std::string> auto_rail_candidates() {
  const topo::Topology machine = topo::load_topology({.with_io = true, .xml = {}});
  const std::vector<topo::NetworkDevice> devices =
      topo::network_devices_in(machine.get(), /*this_machine=*/true);
  const std::vector<topo::Gpu> gpus = topo::gpus_in(machine.get());
  const std::optional<int> local_rank =
      launch_env_present() ? std::optional<int>(detect_launch_env().local_rank) : std::nullopt;
  const topo::GpuChoice gpu = topo::choose_gpu(gpus, topo::gpu_hints_from_environment(local_rank));
  if (gpu.gpu) {
    const topo::Gpu& mine = gpus[*gpu.gpu];
    return {topo::devices_nearest_gpu(devices, mine.pci_path),
            "GPU " + mine.pci_busid + " (" + gpu.why + ")"};
  }
  return {topo::nearest_devices(devices, topo::process_binding()),
          "this rank's cores (no GPU: " + gpu.why + ")"};
}

coll::ShmLinkCost link_cost(Reader& read) {
  const coll::ShmLinkCost defaults;
  coll::ShmLinkCost cost;
  cost.step_us = read.take("TPF_SHM_STEP_US", env_positive_number("TPF_SHM_STEP_US"),
                           defaults.step_us, number_text);
  cost.step_us_per_excess_rank =
      read.take("TPF_SHM_EXCESS_STEP_US", env_positive_number("TPF_SHM_EXCESS_STEP_US"),
                defaults.step_us_per_excess_rank, number_text);
  cost.copy_gbps = read.take("TPF_SHM_COPY_GBPS", env_positive_number("TPF_SHM_COPY_GBPS"),
                             defaults.copy_gbps, number_text);
  cost.reduce_gbps = read.take("TPF_SHM_REDUCE_GBPS", env_positive_number("TPF_SHM_REDUCE_GBPS"),
                               defaults.reduce_gbps, number_text);
  return cost;
}

coll::NetworkLinkCost network_cost(Reader& read) {
  const coll::NetworkLinkCost defaults;
  coll::NetworkLinkCost cost;
  cost.call_us = read.take("TPF_NET_CALL_US", env_positive_number("TPF_NET_CALL_US"),
                           defaults.call_us, number_text);
  cost.step_us = read.take("TPF_NET_STEP_US", env_positive_number("TPF_NET_STEP_US"),
                           defaults.step_us, number_text);
  cost.message_us = read.take("TPF_NET_MESSAGE_US", env_nonnegative_number("TPF_NET_MESSAGE_US"),
                              defaults.message_us, number_text);
  cost.link_gbps = read.take("TPF_NET_GBPS", env_positive_number("TPF_NET_GBPS"),
                             defaults.link_gbps, number_text);
  cost.reduce_gbps = read.take("TPF_NET_REDUCE_GBPS", env_positive_number("TPF_NET_REDUCE_GBPS"),
                               defaults.reduce_gbps, number_text);
  return cost;
}

}  // namespace

std::chrono::milliseconds host_lost_after_setting() {
  return base::env_seconds("TPF_HOST_LOST_S").value_or(kDefaultHostLostAfter);
}

CommSettings resolve_comm_settings(const CommOptions& options) {
  CommSettings s;
  Reader read(s.report);
  auto ms_text = [](std::chrono::milliseconds ms) { return seconds_text(ms); };
  auto bytes_text = [](size_t bytes) { return std::to_string(bytes) + " B"; };

  if (options.timeout) {
    s.timeout = read.take("TPF_TIMEOUT", options.timeout, kDefaultTimeout, ms_text);
    s.report.back().source = "CommOptions::timeout";
  } else {
    s.timeout =
        read.take("TPF_TIMEOUT", base::env_seconds("TPF_TIMEOUT"), kDefaultTimeout, ms_text);
  }
  // An explicit timeout bounds setup too; the default one is capped (kMaxSetupTimeout).
  s.setup_timeout = options.timeout.value_or(std::min(s.timeout, kMaxSetupTimeout));

  const char* slot_source =
      options.buffer_bytes ? "CommOptions::buffer_bytes" : "TPF_SHM_BUFFER_BYTES";
  s.slot_bytes = read.take(
      "TPF_SHM_BUFFER_BYTES",
      options.buffer_bytes ? options.buffer_bytes : base::env_bytes("TPF_SHM_BUFFER_BYTES"),
      kDefaultSlotBytes, bytes_text);
  if (options.buffer_bytes) s.report.back().source = slot_source;
  if (s.slot_bytes > kMaxSlotBytes) {
    throw Error(ErrorCode::invalid_argument,
                std::string(slot_source) + " = " + std::to_string(s.slot_bytes) +
                    " bytes is more than the largest staging slot, " +
                    std::to_string(kMaxSlotBytes >> 30) +
                    " GiB (each rank maps two in /dev/shm; the default is 256 KiB)");
  }
  // Slots start on cache lines; below a page they would only cost steps.
  s.slot_bytes = std::max(kMinSlotBytes, s.slot_bytes / 64 * 64);
  s.report.back().value = bytes_text(s.slot_bytes);

  constexpr size_t kEagerCapacity = transport::ShmFabric::kEagerCapacity;
  s.tuning.eager_max_bytes = std::min(
      kEagerCapacity, read.take("TPF_EAGER_MAX_BYTES", base::env_bytes("TPF_EAGER_MAX_BYTES"),
                                kEagerCapacity, bytes_text));
  s.tuning.forced_all_reduce = env_all_reduce_algorithm();
  s.report.push_back({"TPF_ALLREDUCE_ALGO",
                      s.tuning.forced_all_reduce
                          ? coll::all_reduce_algorithm_name(*s.tuning.forced_all_reduce)
                          : "automatic",
                      s.tuning.forced_all_reduce ? "TPF_ALLREDUCE_ALGO" : "default"});
  s.tuning.link_cost = link_cost(read);
  s.tuning.forced_network = env_network_algorithm();
  s.report.push_back({"TPF_NET_ALGO",
                      s.tuning.forced_network
                          ? coll::network_algorithm_name(*s.tuning.forced_network)
                          : "automatic",
                      s.tuning.forced_network ? "TPF_NET_ALGO" : "default"});
  s.tuning.network_cost = network_cost(read);

  s.asymmetric_fences = read.take("TPF_ASYMMETRIC_FENCES", env_switch("TPF_ASYMMETRIC_FENCES"),
                                  true, [](bool on) { return std::string(on ? "1" : "0"); });
  s.job_id = read.take("TPF_JOB_ID", base::env_string("TPF_JOB_ID"), std::string("local"),
                       [](const std::string& id) { return id; });
  s.flight_recorder_size =
      read.take("TPF_FLIGHT_RECORDER_SIZE", env_flight_recorder_size(),
                FlightRecorder::kDefaultCapacity, [](size_t n) { return std::to_string(n); });

  // A rank pinned to one core cannot see the others, so the launcher's view (TPF_CPUS) wins.
  const int online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.job_cpus = read.take(
      "TPF_CPUS", env_count("TPF_CPUS", 1 << 20), online, [](int n) { return std::to_string(n); },
      "hardware (online CPUs)");
  const std::optional<std::string> node_id = env_node_id();
  s.host_key = topo::local_host_key(node_id);
  s.report.push_back(
      {"TPF_NODE_ID", s.host_key,
       node_id ? "TPF_NODE_ID" : "derived (hostname, boot id, namespaces, /dev/shm)"});
  // The devices UCX uses (transport/ucx_network.cc); the hosts' map learns from them whether
  // rails have links of their own (topo::HostMap::rails_have_own_links).
  const std::optional<std::string> net_devices = base::env_string("UCX_NET_DEVICES");
  s.net_devices = net_devices.value_or("all");
  s.report.push_back({"UCX_NET_DEVICES", s.net_devices,
                      net_devices ? "UCX_NET_DEVICES" : "UCX's default (every device)"});
  if (std::optional<std::string> rails = base::env_string("TPF_RAIL_DEVICES")) {
    const std::vector<std::string> devices = topo::parse_rail_devices(*rails, "TPF_RAIL_DEVICES");
    if (topo::is_auto(devices)) {
      // Resolved when a communicator is created, among the host's ranks (comm/host_discovery.cc).
      const auto [nearest, near_what] = auto_rail_candidates();
      s.net_devices = topo::auto_rail_request(nearest);
      s.report.back().value = nearest.empty() ? "all" : s.net_devices;
      s.report.back().source = "TPF_RAIL_DEVICES=auto (the devices nearest " + near_what +
                               "; the host's ranks share them out when a communicator is created)";
    } else {
      s.net_devices = rail_device_of_this_rank(*rails, devices);
      s.report.back().value = s.net_devices;
      s.report.back().source = "TPF_RAIL_DEVICES (by the launcher's local rank)";
    }
  }
  s.net_transports = read.take("TPF_NET_TRANSPORTS", base::env_string("TPF_NET_TRANSPORTS"),
                               std::string(transport::kNetworkTransports),
                               [](const std::string& tls) { return tls; });
  s.net_protocol = read.take(
      "TPF_NET_PROTOCOL", env_net_protocol(), transport::NetProtocol::automatic,
      [](transport::NetProtocol p) { return std::string(transport::net_protocol_name(p)); });
  s.net_connect_all = read.take("TPF_NET_CONNECT", env_net_connect_all(), false,
                                [](bool all) { return std::string(all ? "all" : "first"); });
  s.host_lost_after = read.take("TPF_HOST_LOST_S", base::env_seconds("TPF_HOST_LOST_S"),
                                kDefaultHostLostAfter, ms_text);
  s.net_notice_wait = read.take("TPF_NET_NOTICE_WAIT_S", base::env_seconds("TPF_NET_NOTICE_WAIT_S"),
                                transport::kDefaultNoticeWait, ms_text);
  if (launch_env_present()) {
    const LaunchEnv launch = detect_launch_env();
    s.local_world_size = launch.local_world_size;
    s.report.push_back({"local world size", std::to_string(s.local_world_size),
                        "launcher (" + launch.launcher + ")"});
  } else {
    s.report.push_back({"local world size", "comm size", "no launcher"});
  }
  return s;
}

std::span<const SettingInfo> setting_catalog() { return kCatalog; }

const SettingReport* CommSettings::reported(std::string_view name) const noexcept {
  for (const SettingReport& r : report) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::vector<SharedSetting> shared_settings(const CommSettings& settings) {
  // TPF_SHM_BUFFER_BYTES is not here: a host's ranks map each other's slots, and joining the
  // shared memory checks their size (transport/shm_fabric.cc).
  static constexpr std::pair<const char*, SharedAmong> kShared[] = {
      {"TPF_EAGER_MAX_BYTES", SharedAmong::host},
      {"TPF_ALLREDUCE_ALGO", SharedAmong::host},
      {"TPF_SHM_STEP_US", SharedAmong::host},
      {"TPF_SHM_EXCESS_STEP_US", SharedAmong::host},
      {"TPF_SHM_COPY_GBPS", SharedAmong::host},
      {"TPF_SHM_REDUCE_GBPS", SharedAmong::host},
      {"TPF_NET_ALGO", SharedAmong::communicator},
      // Which pairs exchange a first message while the communicator is made.
      {"TPF_NET_CONNECT", SharedAmong::communicator},
      {"TPF_NET_CALL_US", SharedAmong::communicator},
      {"TPF_NET_STEP_US", SharedAmong::communicator},
      {"TPF_NET_MESSAGE_US", SharedAmong::communicator},
      {"TPF_NET_GBPS", SharedAmong::communicator},
      {"TPF_NET_REDUCE_GBPS", SharedAmong::communicator},
  };
  std::vector<SharedSetting> shared;
  for (const auto& [name, among] : kShared) {
    const SettingReport* report = settings.reported(name);
    if (report == nullptr) {
      throw Error(ErrorCode::internal, std::string(name) + " was not resolved with the settings");
    }
    shared.push_back({name, report->value, among});
  }
  return shared;
}

int CommSettings::excess_ranks(int comm_size) const noexcept {
  return std::max(0, std::max(comm_size, local_world_size) - job_cpus);
}

}  // namespace tpf::detail

// detect_launch_env(): reads who-am-I from the variables each supported launcher exports. The
// first launcher whose rank variable is present wins, in the order tpf run, mpirun, srun, torchrun,
// so that e.g. `tpf run` inside a Slurm allocation is read as tpf run.

#include "tpf/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "tpf/error.h"

namespace tpf {

namespace {

// Job ids name files and shared-memory segments; keep them short enough for NAME_MAX.
constexpr size_t kMaxJobIdLength = 100;

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// Set and non-empty: launchers sometimes export an empty variable to mean "not used".
std::optional<std::string> env_nonempty(const char* name) {
  auto v = env_value(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

[[noreturn]] void fail(const std::string& launcher, const std::string& message) {
  throw Error(ErrorCode::bootstrap, "detect_launch_env (" + launcher + "): " + message);
}

int64_t parse_integer(const std::string& launcher, const char* name, const std::string& value,
                      int64_t min, int64_t max) {
  int64_t out = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  const auto [end, ec] = std::from_chars(first, last, out);
  if (value.empty() || ec != std::errc() || end != last) {
    fail(launcher, std::string(name) + "='" + value + "' is not an integer");
  }
  if (out < min || out > max) {
    fail(launcher, std::string(name) + "='" + value + "' is out of range [" + std::to_string(min) +
                       ", " + std::to_string(max) + "]");
  }
  return out;
}

int required_int(const std::string& launcher, const char* name, const char* because, int64_t min) {
  const auto v = env_value(name);
  if (!v) fail(launcher, std::string(because) + " is set but " + name + " is missing");
  return static_cast<int>(parse_integer(launcher, name, *v, min, 1 << 24));
}

std::optional<int> optional_int(const std::string& launcher, const char* name, int64_t min) {
  const auto v = env_nonempty(name);
  if (!v) return std::nullopt;
  return static_cast<int>(parse_integer(launcher, name, *v, min, 1 << 24));
}

uint16_t parse_port(const std::string& launcher, const char* name, const std::string& value) {
  return static_cast<uint16_t>(parse_integer(launcher, name, value, 1, 65535));
}

std::string sanitize_job_id(const std::string& launcher, const std::string& raw) {
  std::string out;
  for (char ch : raw) {
    const bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
    out.push_back(ok ? ch : '_');
  }
  if (out.size() > kMaxJobIdLength) out.resize(kMaxJobIdLength);
  // "." and ".." would make odd file names; an empty id would collide across jobs.
  if (out.empty() || out == "." || out == "..") {
    fail(launcher, "job id '" + raw + "' is unusable; set TPF_JOB_ID to a unique name");
  }
  return out;
}

// MASTER_ADDR/MASTER_PORT when both are set; on one host rank 0 may pick a port instead.
void resolve_rank0_store(const std::string& launcher, LaunchEnv& env) {
  env.rank0_hosts_store = true;
  const auto addr = env_nonempty("MASTER_ADDR");
  const auto port = env_nonempty("MASTER_PORT");
  if (addr && port) {
    env.store_host = *addr;
    env.store_port = parse_port(launcher, "MASTER_PORT", *port);
    return;
  }
  if (addr || port) {
    fail(launcher, std::string(addr ? "MASTER_ADDR" : "MASTER_PORT") + " is set but " +
                       (addr ? "MASTER_PORT" : "MASTER_ADDR") + " is missing; set both or neither");
  }
  if (env.local_world_size < env.world_size) {
    fail(launcher, "the job spans several hosts (local size " +
                       std::to_string(env.local_world_size) + " < world size " +
                       std::to_string(env.world_size) +
                       "); set MASTER_ADDR and MASTER_PORT to where rank 0 can listen");
  }
  env.store_host = "127.0.0.1";
  env.store_port = 0;  // rank 0 binds a free port and publishes it in a file
}

std::string master_job_id(const std::string& launcher) {
  const auto addr = env_nonempty("MASTER_ADDR");
  const auto port = env_nonempty("MASTER_PORT");
  if (addr && port) return *addr + ":" + *port;
  fail(launcher,
       "cannot tell this job from others on the host; set TPF_JOB_ID to a name that "
       "all ranks of this job share");
}

void read_tpf(LaunchEnv& env) {
  const std::string l = "tpf run";
  env.rank = required_int(l, "TPF_RANK", "TPF_RANK", 0);
  env.world_size = required_int(l, "TPF_WORLD_SIZE", "TPF_RANK", 1);
  env.local_rank = optional_int(l, "TPF_LOCAL_RANK", 0).value_or(env.rank);
  env.local_world_size = optional_int(l, "TPF_LOCAL_WORLD_SIZE", 1).value_or(env.world_size);
  const auto addr = env_value("TPF_STORE_ADDR");
  if (!addr)
    fail(l,
         "TPF_RANK is set but TPF_STORE_ADDR (host:port of the launcher's store) is "
         "missing");
  const size_t colon = addr->rfind(':');
  if (colon == std::string::npos || colon == 0) {
    fail(l, "TPF_STORE_ADDR='" + *addr + "' is not host:port");
  }
  std::string host = addr->substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [IPv6]:port
  }
  env.store_host = host;
  env.store_port = parse_port(l, "TPF_STORE_ADDR", addr->substr(colon + 1));
  env.rank0_hosts_store = false;  // the launcher serves the store
  env.job_id = "tpf-" + *addr;
}

void read_ompi(LaunchEnv& env) {
  const std::string l = "mpirun";
  env.rank = required_int(l, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK", 0);
  env.world_size = required_int(l, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", 1);
  env.local_rank = optional_int(l, "OMPI_COMM_WORLD_LOCAL_RANK", 0).value_or(env.rank);
  env.local_world_size = optional_int(l, "OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(env.world_size);
  if (const auto id = env_nonempty("OMPI_MCA_ess_base_jobid")) {
    env.job_id = "ompi-" + *id;
  } else if (const auto ns = env_nonempty("PMIX_NAMESPACE")) {
    env.job_id = "ompi-" + *ns;
  } else if (!env_nonempty("TPF_JOB_ID")) {
    env.job_id = master_job_id(l);
  }
}

void read_slurm(LaunchEnv& env) {
  const std::string l = "srun";
  env.rank = required_int(l, "SLURM_PROCID", "SLURM_PROCID", 0);
  env.world_size = required_int(l, "SLURM_NTASKS", "SLURM_PROCID", 1);
  env.local_rank = optional_int(l, "SLURM_LOCALID", 0).value_or(env.rank);
  if (auto per_node = optional_int(l, "SLURM_NTASKS_PER_NODE", 1)) {
    env.local_world_size = *per_node;
  } else if (const auto tasks = env_nonempty("SLURM_TASKS_PER_NODE")) {
    // Format "2(x3),1": this node's count is not named, so take the first group's.
    const size_t digits = tasks->find_first_not_of("0123456789");
    env.local_world_size = static_cast<int>(
        parse_integer(l, "SLURM_TASKS_PER_NODE", tasks->substr(0, digits), 1, 1 << 24));
  } else {
    env.local_world_size = env.world_size;
  }
  const auto job = env_nonempty("SLURM_JOB_ID");
  if (job) {
    const auto step = env_nonempty("SLURM_STEP_ID");
    env.job_id = "slurm-" + *job + (step ? "." + *step : "");
  } else if (!env_nonempty("TPF_JOB_ID")) {
    fail(l, "SLURM_PROCID is set but SLURM_JOB_ID is missing; set TPF_JOB_ID");
  }
}

void read_torchrun(LaunchEnv& env) {
  const std::string l = "torchrun";
  env.rank = required_int(l, "RANK", "RANK", 0);
  env.world_size = required_int(l, "WORLD_SIZE", "RANK", 1);
  env.local_rank = optional_int(l, "LOCAL_RANK", 0).value_or(env.rank);
  env.local_world_size = optional_int(l, "LOCAL_WORLD_SIZE", 1).value_or(env.world_size);
  // torchrun exports "none" when no --rdzv-id was given, which is shared by unrelated jobs.
  const auto run_id = env_nonempty("TORCHELASTIC_RUN_ID");
  if (run_id && *run_id != "none") {
    env.job_id = "torchrun-" + *run_id;
  } else if (!env_nonempty("TPF_JOB_ID")) {
    env.job_id = "torchrun-" + master_job_id(l);
  }
}

// torchrun's MASTER_ADDR:MASTER_PORT belong to torch: the elastic agent serves its store there
// (static rendezvous: TORCHELASTIC_USE_AGENT_STORE=True), or worker rank 0's torch.distributed
// store will (--standalone, c10d rendezvous). So on one host rank 0 binds a free loopback port and
// publishes it in a file; across hosts it announces a free port through the agent's store
// (torch_store_key, set once the job id is final), and only without an agent store binds
// MASTER_PORT, as torch's own rank 0 would.
void resolve_torchrun_store(LaunchEnv& env) {
  resolve_rank0_store("torchrun", env);
  if (env.local_world_size >= env.world_size) {
    env.store_host = "127.0.0.1";
    env.store_port = 0;
  }
}

// The key under which rank 0 announces its store's port in torchrun's agent store: per job and
// per restart of the workers (the agent's store outlives them, so an earlier attempt's port
// must not be read as this one's). The leading "/" is what torch's own clients add.
std::string torch_store_key(const LaunchEnv& env) {
  if (env.launcher != "torchrun" || env.store_port == 0 ||
      env_value("TORCHELASTIC_USE_AGENT_STORE").value_or("") != "True") {
    return "";
  }
  const int attempt = optional_int("torchrun", "TORCHELASTIC_RESTART_COUNT", 0).value_or(0);
  return "/tpf/" + env.job_id + "/attempt_" + std::to_string(attempt) + "/store_port";
}

void validate(const std::string& launcher, const LaunchEnv& env, const char* rank_var,
              const char* local_var) {
  if (env.rank >= env.world_size) {
    fail(launcher, std::string(rank_var) + "=" + std::to_string(env.rank) +
                       " is not below the world size " + std::to_string(env.world_size));
  }
  if (env.local_rank >= env.local_world_size) {
    fail(launcher, std::string(local_var) + "=" + std::to_string(env.local_rank) +
                       " is not below the local world size " +
                       std::to_string(env.local_world_size));
  }
  if (env.local_world_size > env.world_size) {
    fail(launcher, "local world size " + std::to_string(env.local_world_size) +
                       " exceeds the world size " + std::to_string(env.world_size));
  }
}

}  // namespace

bool launch_env_present() {
  return env_value("TPF_RANK") || env_value("OMPI_COMM_WORLD_RANK") || env_value("SLURM_PROCID") ||
         env_value("RANK");
}

LaunchEnv detect_launch_env() {
  LaunchEnv env;
  if (env_value("TPF_RANK")) {
    env.launcher = "tpf";
    read_tpf(env);
    validate("tpf run", env, "TPF_RANK", "TPF_LOCAL_RANK");
  } else if (env_value("OMPI_COMM_WORLD_RANK")) {
    env.launcher = "mpirun";
    read_ompi(env);
    validate("mpirun", env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK");
    resolve_rank0_store("mpirun", env);
  } else if (env_value("SLURM_PROCID")) {
    env.launcher = "srun";
    read_slurm(env);
    validate("srun", env, "SLURM_PROCID", "SLURM_LOCALID");
    resolve_rank0_store("srun", env);
  } else if (env_value("RANK")) {
    env.launcher = "torchrun";
    read_torchrun(env);
    validate("torchrun", env, "RANK", "LOCAL_RANK");
    resolve_torchrun_store(env);
  } else {
    throw Error(ErrorCode::bootstrap,
                "detect_launch_env: no launcher environment found; start the job with "
                "`tpf run -n N -- <program>`, or provide TPF_RANK, TPF_WORLD_SIZE and "
                "TPF_STORE_ADDR; or run under mpirun (OMPI_COMM_WORLD_RANK/SIZE), srun "
                "(SLURM_PROCID, SLURM_NTASKS) or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, "
                "MASTER_PORT)");
  }
  if (const auto id = env_nonempty("TPF_JOB_ID")) env.job_id = *id;
  env.job_id = sanitize_job_id(env.launcher, env.job_id);
  env.secret = env_value("TPF_JOB_SECRET").value_or("");
  env.torch_store_key = torch_store_key(env);
  return env;
}

}  // namespace tpf

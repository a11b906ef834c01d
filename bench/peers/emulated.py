"""Runs the peer comparison across emulated hosts (scripts/emulated-hosts.sh): H network namespaces
joined by a bridge, links capped with tc tbf, ranks placed host by host (ranks 0..R-1 on host 0,
...). Every implementation crosses the same links:

  tpf    one `tpf bench` per rank in its host's namespace (torchrun-style variables; UCX over eth0)
  mpi    Open MPI's TCP path: mpirun with pml ob1, btl tcp,self,vader (vader between a host's own
         ranks: mpirun starts one daemon per host name, so ranks of two hosts are never "local")
  mpiucx Open MPI's UCX path: pml ucx, UCX_TLS=tcp (UCX would find shared memory between
         namespaces and bypass the links, so none at all)
  gloo   one gloo_bench per rank, listening on its host's address, FileStore rendezvous
  torch  one torch_gloo_bench.py per rank, env:// rendezvous on host 0, GLOO_SOCKET_IFNAME=eth0

mpirun starts its remote daemons through a remote shell; here that is `ip netns exec NS sh -c`
(bench/peers/netns_rsh.sh), the namespace standing for the host name (and given as the daemon's
hostname). Needs root and iproute2.
"""
import os
import secrets
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "emulated-hosts.sh")
RSH = os.path.join(HERE, "netns_rsh.sh")


class Cluster:
    """The namespaces, made on entry and always removed on exit."""

    def __init__(self, hosts, rate):
        self.hosts = hosts
        self.rate = rate
        self.name = "tpfp%d" % os.getpid()

    def __enter__(self):
        cmd = [SCRIPT, "up", self.name, str(self.hosts)] + ([self.rate] if self.rate else [])
        subprocess.run(cmd, check=True)
        # The link rate tpf's cost model is told (TPF_NET_GBPS), as `emulated-hosts.sh run` tells
        # it; None without a cap.
        self.net_gbps = None
        if self.rate:
            self.net_gbps = subprocess.run([SCRIPT, "gbps", self.rate], check=True,
                                           capture_output=True, text=True).stdout.strip() or None
        return self

    def __exit__(self, *exc):
        subprocess.run([SCRIPT, "down", self.name], check=False)

    def netns(self, h):
        return "%s-h%d" % (self.name, h)

    @staticmethod
    def address(h):
        return "127.100.0.%d" % (h + 1)


class Launch:
    """Starts one implementation's ranks across the cluster and returns rank 0's output."""

    def __init__(self, runner, cluster, port):
        self.r = runner
        self.c = cluster
        self.port = port

    def run(self, impl, coll, n):
        self.port += 1  # a fresh rendezvous port per run: no run waits for the last one's to close
        per_host = n // self.c.hosts
        with tempfile.TemporaryDirectory(prefix="emulated.") as d:
            if impl in ("mpi", "mpiucx"):
                return self._collect([self._mpi(impl, coll, n, per_host, d)], d)
            procs = [self._rank(impl, coll, n, per_host, rank, d) for rank in range(n)]
            out = self._collect(procs, d)
            if impl == "tpf":
                with open(os.path.join(d, "tpf.json")) as f:
                    return f.read()
            return out

    def _env(self, n, per_host, rank):
        return {"RANK": rank, "WORLD_SIZE": n, "LOCAL_RANK": rank % per_host,
                "LOCAL_WORLD_SIZE": per_host, "MASTER_ADDR": self.c.address(0),
                "MASTER_PORT": self.port}

    def _rank(self, impl, coll, n, per_host, rank, d):
        h = rank // per_host
        env = self._env(n, per_host, rank)
        flags = self.r.sweep_flags()
        if impl == "tpf":
            env.update(TPF_JOB_SECRET=self.secret(d), UCX_NET_DEVICES="eth0")
            if self.c.net_gbps and "TPF_NET_GBPS" not in os.environ:
                env.update(TPF_NET_GBPS=self.c.net_gbps)
            cmd = [self.r.tpf, *self.r.tpf_bench_args(coll)]
            if rank == 0:
                cmd += ["--json", os.path.join(d, "tpf.json")]
        elif impl == "gloo":
            env.update(GLOO_STORE_DIR=os.path.join(d, "store"), GLOO_HOSTNAME=self.c.address(h))
            os.makedirs(env["GLOO_STORE_DIR"], exist_ok=True)
            cmd = [self.r.gloo_bench, "-c", coll, *flags]
        else:
            env.update(GLOO_SOCKET_IFNAME="eth0")
            cmd = [self.r.python, os.path.join(HERE, "torch_gloo_bench.py"), "-c", coll, *flags]
        variables = ["%s=%s" % (k, v) for k, v in env.items()]
        # Where every rank can have a core, rank r runs on core r: the emulated hosts share this
        # machine's cores, and ranks that sleep in their waits are woken onto one core for their
        # first few hundred calls (bench/net/emulated_hosts_bench.sh). mpirun's are pinned alike.
        pin = ["taskset", "-c", str(rank)] if self._pins(n) else []
        return self._start(["ip", "netns", "exec", self.c.netns(h), "env", *variables, *pin, *cmd],
                           d, rank)

    def _mpi(self, impl, coll, n, per_host, d):
        hosts = ",".join("%s:%d" % (self.c.netns(h), per_host) for h in range(self.c.hosts))
        cmd = ["ip", "netns", "exec", self.c.netns(0), self.r.mpirun, "--allow-run-as-root",
               "-np", str(n), "--host", hosts, "--mca", "plm_rsh_agent", RSH,
               "--mca", "oob_tcp_if_include", "eth0", "--bind-to", "none"]
        if impl == "mpi":
            cmd += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self,vader",
                    "--mca", "btl_tcp_if_include", "eth0"]
        else:
            # Open MPI 4.1 takes UCX only over RDMA transports unless told any will do.
            cmd += ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca",
                    "pml_ucx_devices", "any", "--mca", "osc", "^ucx", "-x", "UCX_TLS=tcp",
                    "-x", "UCX_NET_DEVICES=eth0"]
        if self._pins(n):
            # Rank r on core r, as the other implementations' ranks: each emulated host's orted
            # would bind its ranks from core 0 (`--bind-to core` puts every host's first rank on
            # core 0), so the rank pins itself by its world rank.
            cmd += ["sh", "-c", 'exec taskset -c "$OMPI_COMM_WORLD_RANK" "$@"', "sh"]
        cmd += [self.r.mpi_bench, "-c", coll, *self.r.sweep_flags()]
        return self._start(cmd, d, 0)

    @staticmethod
    def _pins(n):
        return n <= (os.cpu_count() or 1)

    @staticmethod
    def secret(d):
        path = os.path.join(d, "secret")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(secrets.token_hex(16))
        with open(path) as f:
            return f.read()

    def _start(self, cmd, d, rank):
        if self.r.args.verbose:
            print("+ " + " ".join(cmd))
        out = open(os.path.join(d, "out%d" % rank), "w")
        err = open(os.path.join(d, "err%d" % rank), "w")
        return subprocess.Popen(cmd, stdout=out, stderr=err), out, err

    def _collect(self, procs, d):
        failed = []
        for i, (p, out, err) in enumerate(procs):
            try:
                code = p.wait(timeout=self.r.args.timeout)
            except BaseException:  # a timeout, or SIGTERM unwinding (compare.py): no orphans
                for q, _, _ in procs:
                    q.kill()
                raise
            out.close()
            err.close()
            if code != 0:
                with open(os.path.join(d, "err%d" % i)) as f:
                    failed.append("rank %d exited with %d: %s" % (i, code, f.read()[-1500:]))
        if failed:
            raise RuntimeError("\n".join(failed))
        with open(os.path.join(d, "out0")) as f:
            return f.read()

"""A real SLURM run of configs/slurm/: a single-node cluster (munged, slurmctld, slurmd) brought up in a
temporary directory, the 4-task array over a sampled file and the dependent merge job submitted with
submit.sh, and the merged file compared, bit for bit, with a run without shards; then a lost shard
recomputed by a one-task array (ADGRAD_SHARDS=4) and merged again.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (.ci/run installs them); skipped,
with the reason shown, where they are missing."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "scancel")
M = 2000

missing = [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]
pytestmark = pytest.mark.skipif(
    bool(missing) or os.geteuid() != 0,
    reason=f"needs root and SLURM + munge (apt-get install slurmctld slurmd slurm-client munge); "
           f"missing: {', '.join(missing) or 'root'}")

SLURM_CONF = """\
ClusterName=adgradtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def program(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout, logs=()):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.3)
    tails = "\n".join(f"--- {p}\n{Path(p).read_text()[-2000:]}" for p in logs if os.path.exists(p))
    pytest.fail(f"timed out after {timeout} s waiting for {what}\n{tails}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Environment for SLURM clients talking to a fresh single-node cluster; the daemons are stopped
    (by their process ids) at teardown."""
    d = tmp_path_factory.mktemp("slurm")
    d.chmod(0o755)                      # munged wants its socket's directory readable by all
    (d / "state").mkdir()
    (d / "spool").mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    host = socket.gethostname().split(".")[0]    # the names slurmd knows itself by; addresses are loopback
    conf.write_text(SLURM_CONF.format(host=host, dir=d, ctld_port=free_port(),
                                      d_port=free_port(), cpus=os.cpu_count()))
    env = {**os.environ, "SLURM_CONF": str(conf),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    procs = []

    def start(name, *args):
        log = open(d / f"{name}.out", "w")
        procs.append(subprocess.Popen([program(name), *args], stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    try:
        start("munged", "-F", "--force", f"--key-file={key}", f"--socket={d}/munge.socket",
              f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed")
        wait_for("munged", lambda: (d / "munge.socket").exists(), 10, [d / "munged.out"])
        start("slurmctld", "-D", "-i", "-f", str(conf))
        start("slurmd", "-D", "-f", str(conf), "-N", host)
        logs = [d / "slurmctld.out", d / "slurmd.out"]

        def idle():
            out = subprocess.run([program("sinfo"), "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            return out.stdout.strip() == "idle"
        wait_for("the node to be idle", idle, 30, logs)
        yield env, d
    finally:
        if len(procs) == 3:             # jobs still running (a failed test) end with the cluster
            subprocess.run([program("scancel"), "--user", "root"], env=env, capture_output=True, timeout=10)
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def job_state(env, job):
    """(JobState, ExitCode) of a job, or (None, None) if scontrol could not tell."""
    out = subprocess.run([program("scontrol"), "show", "job", job], env=env, capture_output=True, text=True)
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    return fields.get("JobState"), fields.get("ExitCode")


def read(path):
    with h5py.File(path, "r") as f:
        data = {}
        f.visititems(lambda n, o: data.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return data


def test_array_then_merge_equals_single_run(cluster, tmp_path):
    env, d = cluster
    work = tmp_path / "configs"
    shutil.copytree(ROOT / "configs" / "slurm", work / "slurm")
    shutil.copy(ROOT / "configs" / "eam_model.yaml", work)
    config = work / "slurm" / "eam.yaml"

    def adgrad(*args):
        subprocess.run([Path(sys.executable).parent / "adgrad", *map(str, args)], env=env, cwd=tmp_path,
                       check=True, capture_output=True)
    adgrad("sample", config, "-n", M, "-o", work / "slurm" / "points.h5")
    adgrad("run", config, "-q", "-o", tmp_path / "single.h5")       # also fills the kernel cache
    (tmp_path / "out").mkdir()
    submit = subprocess.run([work / "slurm" / "submit.sh", config, "4", "out/eam.h5"], env=env, cwd=tmp_path,
                            capture_output=True, text=True)
    assert submit.returncode == 0, submit.stderr
    array, merge = submit.stdout.split()

    wait_merged(env, d, tmp_path, array, merge, tasks=4)
    assert_same(tmp_path / "single.h5", tmp_path / "out" / "eam.h5")

    # a lost shard is recomputed by a one-task array that names N, then merged again
    (tmp_path / "out" / "eam.shard2of4.h5").unlink()
    (tmp_path / "out" / "eam.h5").unlink()
    array = sbatch(env, tmp_path, "--array=2", work / "slurm" / "array.sbatch", config, "out/eam.h5",
                   ADGRAD_SHARDS="4")
    merge = sbatch(env, tmp_path, f"--dependency=afterok:{array}", work / "slurm" / "merge.sbatch", "out/eam.h5", "4")
    wait_merged(env, d, tmp_path, array, merge, tasks=1)
    assert_same(tmp_path / "single.h5", tmp_path / "out" / "eam.h5")


def sbatch(env, cwd, *args, **extra_env):
    res = subprocess.run([program("sbatch"), "--parsable", *map(str, args)], env={**env, **extra_env}, cwd=cwd,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def wait_merged(env, d, cwd, array, merge, tasks):
    """Wait for the merge job; it must have completed after `tasks` array tasks and merged 4 shards."""
    final = []

    def finished():                     # None: scontrol did not answer (a busy controller); ask again
        state = job_state(env, merge)
        if state[0] is None or state[0] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return False
        final.append(state)
        return True
    wait_for("the array and the merge job", finished, 50, sorted(cwd.glob("adgrad-*.log")) + [d / "slurmctld.out"])
    logs = sorted(cwd.glob(f"adgrad-{array}_*.log")) + sorted(cwd.glob(f"adgrad-merge-{merge}.log"))
    report = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in logs)
    assert final[0] == ("COMPLETED", "0:0"), report
    assert len(logs) == tasks + 1, report
    assert f"4 shard(s), {M} points" in report and "merged from 4 shard(s), complete" in report


def assert_same(single_path, merged_path):
    single, merged = read(single_path), read(merged_path)
    names = ["E", "_adgrad/exact/dE_dalpha_sum", "dE_dalpha_sum", "dE_dx"]
    assert sorted(merged) == names
    for name in names:
        assert merged[name].tobytes() == single[name].tobytes(), name
    with h5py.File(merged_path, "r") as f:
        assert f["dE_dx"].is_virtual and f.attrs["complete"] and f.attrs["points"] == M
        assert f.attrs["threads"] == 1          # array.sbatch: --threads from --cpus-per-task

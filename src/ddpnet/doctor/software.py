"""software family: python, torch and its CUDA build, the gloo/NCCL/MPI backends, the NCCL
version and libnccl as the loader finds it, NVIDIA driver and GPUs (nvidia-ml-py), /dev/shm,
and the open-file limit.

The doctor never imports torch: importing it costs 1-4 s and a broken CUDA install can crash
the importer. A child process imports it once per torch install and the answer is cached
(keyed by the install's files); the loader's libnccl and NVML are read on every run.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs

#: importing torch the first time on a loaded node can take many seconds (cached after)
_PROBE_TIMEOUT = 30.0

#: defines ``summary()``: one dict about torch, every part guarded so a missing piece is a
#: value; run in a child (:data:`TORCH_PROBE`) or, where torch is imported anyway, in-process
_SUMMARY = r"""
def summary():
    out = {}
    try:
        import torch, torch.distributed as dist
        out["torch"] = torch.__version__
        out["cuda_build"] = torch.version.cuda
        out["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
        out["nccl_backend"] = bool(dist.is_available() and dist.is_nccl_available())
        out["mpi"] = bool(dist.is_available() and dist.is_mpi_available())
        if torch.version.cuda:
            try:
                v = torch.cuda.nccl.version()
                out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception as e:
                out["cuda_error"] = str(e)[:200]
    except Exception as e:
        out["torch_error"] = f"{type(e).__name__}: {e}"[:300]
    return out
"""

#: prints one JSON object about torch (``summary()``)
TORCH_PROBE = _SUMMARY + "\nimport json, sys\nsys.stdout.write(json.dumps(summary()))\n"


def torch_summary() -> dict[str, Any]:
    """What :data:`TORCH_PROBE` prints, from this process: for a caller that has imported
    torch (``ddpnet check``'s ranks), so no child interpreter imports it a second time."""
    scope: dict[str, Any] = {}
    exec(_SUMMARY, scope)  # our own constant: the probe has one copy
    out: dict[str, Any] = scope["summary"]()
    return out


def torch_key() -> str | None:
    """What the cached torch facts depend on: this interpreter, torch's files and a pip
    NCCL next to it (mtimes). None when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    parts = [sys.executable, str(root)]
    for path in (root / "version.py", root / "lib" / "libtorch_cuda.so",
                 root.parent / "nvidia" / "nccl" / "lib" / "libnccl.so.2"):
        try:
            parts.append(f"{path.name}:{path.stat().st_mtime_ns}")
        except OSError:
            parts.append(f"{path.name}:-")
    import zlib

    return f"{zlib.crc32('|'.join(parts).encode()):08x}"


def torch_facts(host: Host) -> dict[str, Any]:
    """torch's version, CUDA build, backends and NCCL version, from a child process that
    imports torch (1-4 s) or ``host.torch_probe``, cached per torch install under
    ``host.cache``: what a given install was built with does not change until it does."""
    key = torch_key()
    if key is None:
        return {"torch_error": "ModuleNotFoundError: No module named 'torch'"}
    cache = host.cache / f"torch-{key}.json" if host.cache else None
    if cache is not None:
        text = host.read(cache)
        if text:
            try:
                data: dict[str, Any] = json.loads(text)
                return data
            except ValueError:
                pass
    if host.torch_probe is not None:
        data = dict(host.torch_probe())
    else:
        out = host.run([sys.executable, "-c", TORCH_PROBE], _PROBE_TIMEOUT)
        if out is None:
            return {"probe_error": f"importing torch did not finish in {_PROBE_TIMEOUT:.0f} s"}
        try:
            data = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"probe_error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    if cache is not None and "torch" in data:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(data))
        except OSError:
            pass
    return data


def nccl_by_loader() -> dict[str, Any]:
    """libnccl as the dynamic loader finds it now, and its version (``ncclGetVersion``)."""
    import ctypes

    for name in ("libnccl.so.2", "libnccl.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        ver = ctypes.c_int(0)
        try:
            if lib.ncclGetVersion(ctypes.byref(ver)) != 0:
                return {"libnccl": "found", "libnccl_name": name}
        except AttributeError:
            return {"libnccl": "found", "libnccl_name": name}
        return {"libnccl": nccl_version_string(ver.value), "libnccl_name": name}
    return {}


def nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE -> "2.21.5" (x10000 encoding since 2.9, x1000 before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nvml_facts() -> dict[str, Any]:
    """Driver and GPUs through nvidia-ml-py; ``nvml: absent`` without the package."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "absent"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here
        return {"nvml_error": str(exc)[:200]}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus, persistence, capability = [], [], []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(name.decode() if isinstance(name, bytes) else str(name))
            persistence.append(_nvml_or_none(
                lambda h=handle: "on" if pynvml.nvmlDeviceGetPersistenceMode(h) else "off"))
            capability.append(_nvml_or_none(
                lambda h=handle: "{}.{}".format(*pynvml.nvmlDeviceGetCudaComputeCapability(h))))
        return {"driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                "gpus": gpus, "gpu_persistence": persistence,
                "gpu_capabilities": capability}
    except Exception as exc:
        return {"nvml_error": str(exc)[:200]}
    finally:
        pynvml.nvmlShutdown()


def _nvml_or_none(read: Any) -> Any:
    """One NVML reading, None where this GPU or driver does not support it."""
    try:
        return read()
    except Exception:
        return None


def native_facts() -> dict[str, Any]:
    return {**nccl_by_loader(), **nvml_facts()}


def probe(host: Host) -> dict[str, Any]:
    """torch facts (cached child process) and native facts (loader, NVML; every run), once
    per doctor run."""
    return host.memo.get("software", lambda: {**host.native(), **torch_facts(host)})


def read_limits(host: Host) -> Mapping[str, tuple[str, str]]:
    """``/proc/self/limits`` -> {"Max open files": (soft, hard), ...}."""
    limits: dict[str, tuple[str, str]] = {}
    for line in (host.read(host.proc / "self" / "limits") or "").splitlines()[1:]:
        # names are several words; the last 2-3 columns are soft, hard, [units]
        parts = line.split()
        if len(parts) < 3:
            continue
        tail = 3 if not parts[-1].isdigit() and parts[-1] != "unlimited" else 2
        name = " ".join(parts[:-tail])
        limits[name] = (parts[-tail], parts[-tail + 1])
    return limits


class Python(Check):
    id = "software.python"
    family = "software"
    title = "python"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        version = platform.python_version()
        return self.ok(f"python {version}", sys.executable, python=version)


class Torch(Check):
    id = "software.torch"
    family = "software"
    title = "torch"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        p = probe(host)
        if "torch" not in p:
            why = p.get("torch_error") or p.get("probe_error", "unknown")
            return self.fail("torch cannot be imported", str(why),
                             "pip install torch==<the version every node runs> (same CUDA "
                             "build on every node)", torch=None, cuda=None)
        cuda = p.get("cuda_build")
        build = f"CUDA {cuda}" if cuda else "CPU build"
        facts = {"torch": p["torch"], "cuda": cuda}
        gpus = p.get("gpus") or []
        if gpus and not cuda:
            return self.warn(f"torch {p['torch']} ({build}) on a node with {len(gpus)} GPU(s)",
                             "this torch cannot use the GPUs or NCCL",
                             "install a CUDA build of the same torch version, e.g. pip "
                             "install torch --index-url https://download.pytorch.org/whl/cu124",
                             **facts)
        if cuda and "cuda_error" in p:
            return self.warn(f"torch {p['torch']} ({build}): CUDA init failed",
                             str(p["cuda_error"]), "check the NVIDIA driver (nvidia-smi)",
                             **facts)
        return self.ok(f"torch {p['torch']} ({build})", **facts)


class Backends(Check):
    id = "software.backends"
    family = "software"
    title = "distributed backends"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        p = probe(host)
        if "torch" not in p:
            return self.skip("torch not importable")
        have = [name for name, key in (("gloo", "gloo"), ("nccl", "nccl_backend"),
                                       ("mpi", "mpi")) if p.get(key)]
        mpirun = host.which("mpirun")
        detail = f"mpirun: {mpirun}" if mpirun else "mpirun not on PATH"
        facts = {"backends": have}
        if "gloo" not in have:
            return self.fail("torch.distributed has no gloo backend", detail,
                             "install an official torch wheel (gloo is built in)", **facts)
        if p.get("gpus") and "nccl" not in have:
            return self.fail("GPUs present but torch has no NCCL backend", detail,
                             "install a CUDA build of torch", **facts)
        return self.ok(f"backends: {', '.join(have)}", detail, **facts)


class Nccl(Check):
    id = "software.nccl"
    family = "software"
    title = "NCCL"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        p = probe(host)
        nccl, lib = p.get("nccl"), p.get("libnccl")
        facts = {"nccl": nccl, "libnccl": lib}
        if not p.get("cuda_build"):
            if lib:
                return self.ok(f"libnccl {lib} found by the loader (torch is a CPU build)",
                               str(p.get("libnccl_name", "")), **facts)
            return self.skip("CPU build of torch: NCCL not used", **facts)
        if nccl is None:
            return self.warn("NCCL version unknown", str(p.get("cuda_error", "")),
                             "check torch.cuda.nccl.version() on this node", **facts)
        if lib and lib != "found" and lib != nccl:
            return self.warn(
                f"torch uses NCCL {nccl}, the loader finds libnccl {lib}",
                "NCCL_* behaviour may differ from the system library's documentation; "
                "LD_PRELOAD of the system library changes torch's NCCL",
                "keep one NCCL per cluster: compare with `ddpnet check`", **facts)
        return self.ok(f"NCCL {nccl}" + (f", libnccl {lib}" if lib else ""), **facts)


class Gpus(Check):
    id = "software.gpus"
    family = "software"
    title = "NVIDIA driver and GPUs"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        p = probe(host)
        gpus = p.get("gpus")
        if gpus:
            names = ", ".join(sorted(set(gpus)))
            facts = {"driver": p.get("driver"), "gpus": gpus,
                     "gpu_capabilities": p.get("gpu_capabilities")}
            summary = f"driver {p.get('driver')}: {len(gpus)} x {names}"
            off = [str(i) for i, mode in enumerate(p.get("gpu_persistence") or ())
                   if mode == "off"]
            if off:
                return self.warn(f"{summary}; persistence mode off on GPU {','.join(off)}",
                                 "each process that starts CUDA pays the driver's "
                                 "initialisation (seconds per GPU) where nothing holds it",
                                 "nvidia-smi -pm 1 (as root), or enable the "
                                 "nvidia-persistenced service", **facts)
            return self.ok(summary, **facts)
        if p.get("nvml") == "absent":
            return self.skip("nvidia-ml-py not installed (pip install nvidia-ml-py for GPU "
                             "checks)", gpus=[])
        return self.skip(f"no NVIDIA driver or GPU ({p.get('nvml_error', 'none found')})",
                         gpus=[])


def shm_size(host: Host) -> int | None:
    """Size in bytes of the /dev/shm mount, from ``/proc/self/mounts`` (``size=65536k``)."""
    for line in (host.read(host.proc / "self" / "mounts") or "").splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] == "/dev/shm":
            for opt in parts[3].split(","):
                if opt.startswith("size="):
                    return _size(opt[5:])
            return None
    return -1


def _size(text: str) -> int | None:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        if text[-1].lower() in units:
            return int(text[:-1]) * units[text[-1].lower()]
        return int(text)
    except (ValueError, IndexError):
        return None


_SHM_MIN = 1 << 30


class Shm(Check):
    id = "software.shm"
    family = "software"
    title = "/dev/shm"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        size = shm_size(host)
        if size == -1:
            return self.fail("/dev/shm is not mounted",
                             "NCCL and DataLoader workers share memory through it",
                             "mount -t tmpfs -o size=50% tmpfs /dev/shm (and add it to "
                             "/etc/fstab)", shm_bytes=None)
        if size is None:
            return self.ok("/dev/shm mounted (default size: half of RAM)", shm_bytes=None)
        mib = size >> 20
        if size < _SHM_MIN:
            return self.warn(f"/dev/shm is only {mib} MiB",
                             "NCCL's shared-memory transport and DataLoader workers fail "
                             "with 'unable to allocate shared memory' (a container default)",
                             "docker run --shm-size=16g / --ipc=host; or mount -o "
                             "remount,size=16G /dev/shm", shm_bytes=size)
        return self.ok(f"/dev/shm {mib} MiB", shm_bytes=size)


class OpenFiles(Check):
    id = "software.nofile"
    family = "software"
    title = "ulimit -n"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        soft = read_limits(host).get("Max open files", ("", ""))[0]
        memlock = read_limits(host).get("Max locked memory", ("", ""))[0]
        facts = {"ulimit_n": soft, "ulimit_l": memlock}
        if not soft:
            return self.skip("open-file limit not readable", **facts)
        # gloo opens a socket to every peer; NCCL several per ring/tree neighbour
        need = max(4096, 2 * inputs.world_size + 1024)
        if soft != "unlimited" and int(soft) < need:
            return self.warn(
                f"ulimit -n is {soft}, want at least {need} for {inputs.world_size} rank(s)",
                "each rank holds a socket per peer plus files; 'Too many open files' aborts "
                "the job", f"ulimit -n {need} in the job script, or '* soft nofile 1048576' in "
                "/etc/security/limits.d/90-ddpnet.conf", **facts)
        return self.ok(f"ulimit -n {soft}, ulimit -l {memlock}", **facts)


CHECKS: tuple[Check, ...] = (Python(), Torch(), Backends(), Nccl(), Gpus(), Shm(), OpenFiles())

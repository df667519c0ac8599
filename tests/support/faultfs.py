"""FaultFs for Python tests: mounts kvtier_faultfs (tests/support/faultfs/faultfs.cc) over a
backing directory and steers its faults, as kvtier::testing::FaultFs does in C++.

    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    with FaultFs(tmp_path / "backing", tmp_path / "mnt") as fs:
        fs.fail("read", errno.EIO, "blocks/")
        ...

Operation names: lookup open read write xattr rename unlink mkdir readdir statfs flush utimens
truncate chmod symlink readlink, or all. ``path_substr`` matches the call's path relative to the
mount ("" = any path; an open file's calls match the path it was opened with). The daemon is
$KVTIER_FAULTFS_BIN (ctest sets it) unless ``binary`` is given. Every control round trip is
bounded (5 s), and ``__exit__`` releases hung calls, unmounts (detaching and aborting the FUSE
connection when busy) and reaps the daemon, bounded even when the daemon is stopped.
"""

import ctypes
import errno as errno_mod
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

_FUSECTL = "/sys/fs/fuse/connections"
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _binary(binary=None):
    return str(binary or os.environ.get("KVTIER_FAULTFS_BIN", ""))


def fuse_connection_of(mountpoint):
    """The FUSE connection id of the mount at ``mountpoint`` (from /proc/self/mountinfo), or -1."""
    found = -1
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            sep = fields.index("-")
            point = fields[4].encode().decode("unicode_escape")
            if point == str(mountpoint) and fields[sep + 1].startswith("fuse"):
                major, minor = fields[2].split(":")
                if major == "0":
                    found = int(minor)
    return found


def _umount2(path, flags):
    return _libc.umount2(os.fsencode(str(path)), flags) == 0


def abort_fuse_connection(connection):
    """Writes 1 to fusectl's abort file of ``connection`` (mounting fusectl if needed)."""
    if connection < 0:
        return False
    abort = f"{_FUSECTL}/{connection}/abort"
    if not os.path.exists(abort):
        _libc.mount(b"fusectl", _FUSECTL.encode(), b"fusectl", 0, None)
    try:
        with open(abort, "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


class FaultFs:
    def __init__(self, backing, mountpoint, binary=None):
        self.binary = _binary(binary)
        parent = Path(os.path.abspath(mountpoint)).parent
        parent.mkdir(parents=True, exist_ok=True)
        self.mountpoint = str(parent.resolve() / Path(mountpoint).name)
        self.backing = str(Path(backing).absolute())
        self.control = f"/tmp/kvtier_faultfs.py.{os.getpid()}.{id(self)}.sock"
        self.proc = None
        self.connection = -1

    @staticmethod
    def unavailable(binary=None):
        """"" when FUSE can be mounted here, else one line saying why."""
        path = _binary(binary)
        if not path:
            return "FUSE tests need kvtier_faultfs: set KVTIER_FAULTFS_BIN (ctest does)"
        if not os.access(path, os.X_OK):
            return f"FUSE tests need kvtier_faultfs at {path}"
        try:
            os.close(os.open("/dev/fuse", os.O_RDWR))
        except OSError as e:
            return f"FUSE tests need /dev/fuse: {e.strerror}"
        if os.geteuid() != 0 and not shutil.which("fusermount3"):
            return "FUSE tests need root or fusermount3 (apt-get install fuse3)"
        return ""

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self):
        why = FaultFs.unavailable(self.binary)
        if why:
            raise RuntimeError(why)
        if fuse_connection_of(self.mountpoint) >= 0:
            self._detach()
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        before = os.stat(self.mountpoint).st_dev
        self.proc = subprocess.Popen(
            [self.binary, "--backing", self.backing, "--control", self.control, self.mountpoint],
            stdin=subprocess.DEVNULL)
        try:
            self._wait_live(before)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.connection = fuse_connection_of(self.mountpoint)
        return self

    def _wait_live(self, before):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtier_faultfs exited at start (status {self.proc.returncode})")
            try:
                if os.stat(self.mountpoint).st_dev != before and self.command("ping", 1.0) == "ok":
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"kvtier_faultfs did not mount {self.mountpoint} within 10 s")

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.command("release", 2.0)
            except OSError:
                pass
        self._unmount()
        self._reap(1.0)
        try:
            os.unlink(self.control)
        except OSError:
            pass
        return False

    def _detach(self):
        if os.geteuid() == 0:
            _umount2(self.mountpoint, _MNT_DETACH)
        else:
            subprocess.run(["fusermount3", "-u", "-z", "-q", self.mountpoint], timeout=5, check=False)

    def _unmount(self):
        """Unmounts; when busy, detaches and aborts the connection so calls fail at once."""
        if fuse_connection_of(self.mountpoint) < 0:
            return
        if os.geteuid() != 0:
            self._detach()
            return
        if _umount2(self.mountpoint, 0):
            return
        connection = self.connection if self.connection >= 0 else fuse_connection_of(self.mountpoint)
        _umount2(self.mountpoint, _MNT_DETACH)
        abort_fuse_connection(connection)

    def _reap(self, grace_s):
        if self.proc is None:
            return
        for sig, wait_s in ((None, grace_s), (signal.SIGTERM, 1.0), (signal.SIGKILL, 3.0)):
            if sig is not None and self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None

    @property
    def daemon_pid(self):
        return self.proc.pid if self.proc is not None else -1

    # -- steering ----------------------------------------------------------------------------

    def command(self, line, timeout_s=5.0):
        """Sends one protocol line; returns the reply. OSError (TimeoutError) when none comes;
        ValueError for an "err ..." reply."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(self.control)
            s.sendall((line + "\n").encode())
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                reply += chunk
        text = reply.decode().strip()
        if not text:
            raise TimeoutError(f"kvtier_faultfs: no reply to {line!r}")
        if text.startswith("err"):
            raise ValueError(f"kvtier_faultfs: {line}: {text}")
        return text

    def _expect_ok(self, line):
        reply = self.command(line)
        if reply != "ok":
            raise ValueError(f"kvtier_faultfs: {line}: {reply}")

    def hang(self, op, path_substr=""):
        self._expect_ok(f"hang {op} {path_substr or '*'}")

    def delay(self, op, ms, path_substr=""):
        self._expect_ok(f"delay {op} {int(ms)} {path_substr or '*'}")

    def fail(self, op, err, path_substr="", count=-1):
        """``err``: an errno number (errno.EIO) or name ("EIO")."""
        self._expect_ok(f"fail {op} {err} {path_substr or '*'} {int(count)}")

    def short(self, op, path_substr=""):
        self._expect_ok(f"short {op} {path_substr or '*'}")

    def clear(self):
        self._expect_ok("clear")

    def release(self):
        self._expect_ok("release")

    def hung(self):
        return int(self.command("hung"))

    def calls(self, op):
        return int(self.command(f"calls {op}"))

    def counts(self):
        """Every op's number of calls, taken at one instant: {"lookup": N, "open": N, ...}."""
        return {k: int(v) for k, v in (w.split("=") for w in self.command("counts").split())}

    def wait_hung(self, n, timeout_s):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.hung() >= n:
                    return True
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def gone(self):
        """Aborts the FUSE connection and ends the daemon: calls then fail with ENOTCONN."""
        if self.proc is None:
            raise OSError(errno_mod.ESRCH, "kvtier_faultfs is already gone")
        try:
            self.command("gone", 2.0)
        except OSError:
            pass  # the reply can be lost in the exit; the daemon's death is what counts
        self._reap(5.0)

"""Builds kvtier's extension module with CMake (a static libkvtier inside it) for
`pip install --no-build-isolation .`; the pure-Python files come from python/kvtier.

$KVTIER_PIP_BUILD_DIR keeps the CMake build between installs (default: a fresh one under
setuptools' build_temp); $KVTIER_PIP_JOBS caps parallel compile jobs (default: all cores);
$KVTIER_PIP_CMAKE_ARGS (shell words) go to CMake after the defaults, e.g. another build type
(scripts/test gives its own build's, so that ccache has every object already).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build = Path(os.environ.get("KVTIER_PIP_BUILD_DIR") or Path(self.build_temp) / "cmake").resolve()
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(
            ["cmake", "-S", str(ROOT), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
             "-DBUILD_SHARED_LIBS=OFF", "-DKVTIER_BUILD_TESTS=OFF", "-DKVTIER_BUILD_BENCH=OFF",
             "-DKVTIER_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
             *shlex.split(os.environ.get("KVTIER_PIP_CMAKE_ARGS", ""))],
            check=True)
        jobs = os.environ.get("KVTIER_PIP_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "_kvtier", "-j", jobs], check=True)
        built = next((build / "python" / "kvtier").glob("_kvtier*.so"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(
    packages=["kvtier"],
    package_dir={"": "python"},
    package_data={"kvtier": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("kvtier._kvtier")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build/pip"}, "egg_info": {"egg_base": "build"}},
)

"""`pip install .` into a fresh virtualenv, as a user does (README, Install), and the installed
package used from outside the checkout: a real wheel build, not the test venv's editable one.

The build reuses the checkout's target directory (CARGO_TARGET_DIR), so after `scripts/test`
has built the extension it costs a link, not a rebuild."""

import os
import pathlib
import subprocess
import venv

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_pip_install_into_a_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    # The build backend from PyPI (pyproject's build-system), then the package itself.
    subprocess.run([py, "-m", "pip", "install", "-q", "maturin>=1.16,<2"], check=True, env=env)
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-build-isolation", str(ROOT)],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    code = (
        "import spawnkit, spawnkit.subprocess as sp, pathlib, sys\n"
        "print(pathlib.Path(spawnkit.__file__).resolve().is_relative_to(pathlib.Path(sys.prefix).resolve()))\n"
        "print(sp.run(['echo', 'hi'], capture_output=True).stdout.decode().strip())\n"
        "print(spawnkit.Command('true').status())\n"
        "print((pathlib.Path(spawnkit.__file__).parent / 'py.typed').exists())\n"
    )
    out = subprocess.run([py, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "hi", "0", "True"], out

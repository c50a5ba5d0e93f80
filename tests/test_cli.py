import subprocess
import sys

from zerolab import __version__


def test_version_is_printed():
    result = subprocess.run(
        [sys.executable, "-m", "zerolab", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == f"zerolab {__version__}"


def test_no_command_prints_help_and_exits_2():
    result = subprocess.run([sys.executable, "-m", "zerolab"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: zerolab" in result.stdout

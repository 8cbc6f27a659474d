import subprocess
import sys


def test_import_posenc_search_stays_light():
    code = ("import sys, posenc.search; bad = [m for m in ('matplotlib', 'typer', 'rich', 'sklearn', 'posenc.cli', "
            "'posenc.report', 'posenc.experiments', 'torch_geometric') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr

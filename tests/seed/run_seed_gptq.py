"""Runs the reference loader (../shared/seeds/weights.py, unmodified) on one
calibrated GPTQ-Q4 overlay, with tests/seed/gptq_q4_provenance.py (the
documented reading in Python) as its provenance module, and prints
{"verdict", "error", "provenance"} as JSON.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path


def main():
    seed, bundle = Path(sys.argv[1]), sys.argv[2]
    here = Path(__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "seedpkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        shutil.copy(here / "gptq_q4_provenance.py", pkg / "gptq_q4_provenance.py")
        shutil.copy(seed, pkg / "weights.py")
        sys.path.insert(0, tmp)
        from seedpkg.weights import Weights

        try:
            w = Weights.load(bundle)
            out = {"verdict": "valid", "error": None, "provenance": w.provenance}
        except Exception as e:  # the seed signals every rule with an exception
            out = {"verdict": "invalid", "error": f"{type(e).__name__}: {e}", "provenance": None}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Runs the reference loader (../shared/seeds/weights.py) on one bundle and
prints {"verdict", "error", "resident": {name: nbytes}} as JSON.

The seed is a module of a package that also has gptq_q4_provenance; this
script builds a throwaway package around an unmodified copy of the seed,
with that sibling module standing in for the one we do not have.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path


def main():
    seed, bundle = Path(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "seedpkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "gptq_q4_provenance.py").write_text(
            "FORMAT = 'gptq-q4-calibrated (not available to bundlescope tests)'\n"
            "def verify_provenance(directory):\n"
            "    raise ValueError('provenance verification is not available')\n"
        )
        shutil.copy(seed, pkg / "weights.py")
        sys.path.insert(0, tmp)
        from seedpkg.weights import Weights

        resident = {}
        try:
            weights = Weights.load(bundle, progress=lambda p: resident.__setitem__(p["name"], p["resident_tensor_bytes"]))
            aliases = {name: item.nbytes for name, item in weights.tensors.items() if name not in resident}
            out = {"verdict": "valid", "error": None, "resident": resident, "aliases": aliases,
                   "total_nbytes": weights.nbytes}
        except Exception as e:  # the seed signals every rule with an exception
            out = {"verdict": "invalid", "error": f"{type(e).__name__}: {e}", "resident": resident}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""gguf-py's reading of a GGUF file's metadata, as JSON on stdout.

Usage: kvs.py FILE

{"tensors": N, "kvs": [{"key", "type", "count"} for arrays,
{"key", "type", "value"} for scalars and strings]}, in file order, from
gguf-py's GGUFReader (independently of bundlescope's parser).
"""
import json
import sys

import gguf
from gguf import GGUFValueType as V

r = gguf.GGUFReader(sys.argv[1])
kvs = []
for name, field in r.fields.items():
    if name.startswith("GGUF."):
        continue  # the reader's own header fields
    if field.types[0] == V.ARRAY:
        kvs.append({"key": name, "type": f"ARRAY[{field.types[-1].name}]",
                    "count": len(field.data)})
    else:
        v = field.contents()
        kvs.append({"key": name, "type": field.types[0].name,
                    "value": v.item() if hasattr(v, "item") else v})
print(json.dumps({"tensors": len(r.tensors), "kvs": kvs}))

"""docs/provenance.md's reading of the calibrated GPTQ-Q4 format, written
again in Python from the document alone (stdlib only), as the module the
reference loader imports. The tests run the unmodified loader with it, so
the loader's own v2 payload rules apply after these checks.
"""
import hashlib
import json
from pathlib import Path

FORMAT = 'audio8-gptq-q4-calibrated-v1'


def require(ok, message):
    if not ok:
        raise ValueError(message)


def is_sha(s):
    return isinstance(s, str) and len(s) == 64 and all(c in '0123456789abcdef' for c in s)


def identity(parent_manifest_sha256, overlay):
    """overlay: {name: range_sha256}."""
    doc = {'parent': parent_manifest_sha256,
           'overlay': sorted(({'name': n, 'range_sha256': h} for n, h in overlay.items()),
                             key=lambda e: e['name'])}
    text = json.dumps(doc, sort_keys=True, separators=(',', ':'), ensure_ascii=False)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def verify_provenance(directory):
    directory = Path(directory)
    manifest = json.loads((directory / 'manifest.json').read_text())
    require(manifest.get('format') == FORMAT, 'provenance format')
    p = manifest.get('provenance')
    require(isinstance(p, dict), 'provenance block')
    parent = p.get('parent')
    require(isinstance(parent, dict) and is_sha(parent.get('manifest_sha256'))
            and is_sha(parent.get('weights_sha256')) and isinstance(parent.get('source_revision'), str),
            'provenance parent')
    require(isinstance(p.get('calibration'), dict), 'provenance calibration')
    overlay, copied = p.get('overlay'), p.get('copied')
    require(isinstance(overlay, list) and all(isinstance(n, str) for n in overlay), 'provenance overlay')
    require(isinstance(copied, list) and all(isinstance(e, dict) and isinstance(e.get('name'), str)
                                             and is_sha(e.get('range_sha256')) for e in copied),
            'provenance copied')
    require(is_sha(p.get('overlay_identity_sha256')), 'provenance identity field')
    records = {r['name']: r for r in manifest['tensors']}
    copied_names = [e['name'] for e in copied]
    require(len(set(overlay)) == len(overlay) and len(set(copied_names)) == len(copied_names),
            'provenance lists a tensor twice')
    require(not set(overlay) & set(copied_names), 'tensor both overlay and copied')
    require(set(overlay) | set(copied_names) == set(records), 'tensor in neither list, or unknown name')
    require(all(records[n]['precision'] == 'q4' for n in overlay), 'overlay tensor not q4')
    require(Path(manifest['weights_file']).name == manifest['weights_file'], 'unsafe payload path')
    hashes = {}
    with (directory / manifest['weights_file']).open('rb') as f:
        for name, r in records.items():
            f.seek(r['offset'])
            data = f.read(r['bytes'])
            require(len(data) == r['bytes'], 'truncated tensor range')
            hashes[name] = hashlib.sha256(data).hexdigest()
    require(all(hashes[e['name']] == e['range_sha256'] for e in copied), 'copied range hash')
    require(identity(parent['manifest_sha256'], {n: hashes[n] for n in overlay})
            == p['overlay_identity_sha256'], 'overlay identity')
    return manifest

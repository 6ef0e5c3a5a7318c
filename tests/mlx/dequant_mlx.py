"""MLX's own dequantisation of one packed tensor of an audio8 bundle.

Usage: dequant_mlx.py BUNDLE_DIR TENSOR_NAME OUT.npy

Builds the uint32 words and scales the way the seed loader
(shared/seeds/weights.py) hands them to MLX: q3 codes re-packed with +1 and
q4 bytes += 0x11, so MLX's power-of-two affine offset (4 for 3-bit, 8 for
4-bit) applies; q3_full8 unchanged. Then bias = -offset * scale with the
scales in float32, and mx.dequantize(mode='affine') does the rest. The
bundlescope tests compare `bundlescope export` to this bit for bit.
"""
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

GRIDS = {'q3_full8': (3, 4, 7), 'q3': (3, 3, 6), 'q4': (4, 7, 14)}


def unpack(data, bits, columns):
    """LSB-first codes of every row, read through 16-bit windows."""
    position = np.arange(columns, dtype=np.int64) * bits
    padded = np.pad(data, ((0, 0), (0, 1)))
    byte, shift = position // 8, position % 8
    window = padded[:, byte].astype(np.uint16) | (padded[:, byte + 1].astype(np.uint16) << 8)
    return ((window >> shift) & ((1 << bits) - 1)).astype(np.uint8)


def pack(codes, bits):
    """The inverse of unpack, one column at a time."""
    rows, columns = codes.shape
    out = np.zeros((rows, columns * bits // 8), dtype=np.uint8)
    for col in range(columns):
        byte, shift = divmod(col * bits, 8)
        out[:, byte] |= (codes[:, col] << shift).astype(np.uint8)
        if shift + bits > 8:
            out[:, byte + 1] |= codes[:, col] >> (8 - shift)
    return out


def main(directory, name, out):
    directory = Path(directory)
    manifest = json.loads((directory / 'manifest.json').read_text())
    name = manifest.get('aliases', {}).get(name, name)
    record = next(r for r in manifest['tensors'] if r['name'] == name)
    bits, _zero, maximum = GRIDS[record['precision']]
    rows, columns = record['shape']
    with (directory / manifest['weights_file']).open('rb') as f:
        f.seek(record['offset'])
        codes_bytes = f.read(record['codes_bytes'])
        scale_bytes = f.read(record['scales_bytes'])
    packed = np.frombuffer(codes_bytes, dtype=np.uint8).reshape(rows, -1).copy()
    scales = np.frombuffer(scale_bytes, dtype='<f2').reshape(rows, columns // 64)
    codes = unpack(packed, bits, columns)
    assert (codes <= maximum).all(), 'reserved code'
    if record['precision'] == 'q3':
        packed = pack(codes + np.uint8(1), 3)
    elif record['precision'] == 'q4':
        packed += np.uint8(0x11)  # no nibble carry: stored codes are <= 14
    words = mx.array(packed.view('<u4').reshape(rows, -1))
    offset = 4 if bits == 3 else 8
    scale = mx.array(scales).astype(mx.float32)
    values = mx.dequantize(words, scale, -offset * scale, group_size=64, bits=bits,
                           mode='affine', dtype=mx.float32)
    np.save(out, np.array(values, dtype=np.float32))


if __name__ == '__main__':
    main(*sys.argv[1:4])

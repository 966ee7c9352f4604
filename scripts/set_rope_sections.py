"""Sets `ARCH.rope.dimension_sections` of a GGUF file in place, touching nothing else.

    PYTHONPATH=$LLAMA_SRC/gguf-py python3 scripts/set_rope_sections.py FILE S0 S1 S2 S3

The key must already hold four int32 / uint32 (the new values take the same bytes,
so no offset moves). Checks afterwards that the file size, the sha256 of the tensor
data region and every byte outside the four values are unchanged, and prints the
tensor data sha256 and the whole file's sha256 before and after. Needs gguf-py
(`pip install gguf`, or the copy in llama.cpp's tree: scripts/build_llama_cpp.sh).
"""
import hashlib
import sys

from gguf import GGUFReader, GGUFValueType


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def main():
    path, new = sys.argv[1], [int(x) for x in sys.argv[2:6]]
    if len(new) != 4:
        sys.exit(__doc__)
    with open(path, "rb") as f:
        before = f.read()
    r = GGUFReader(path, "r+")
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    key = f"{arch}.rope.dimension_sections"
    field = r.fields.get(key)
    if field is None:
        sys.exit(f"{path}: no {key}")
    if field.types[:1] != [GGUFValueType.ARRAY] or len(field.data) != 4 or \
            field.types[1] not in (GGUFValueType.INT32, GGUFValueType.UINT32):
        sys.exit(f"{path}: {key} is not an array of 4 int32/uint32")
    old = [int(field.parts[i][0]) for i in field.data]
    # Byte ranges of the four values, for the check below.
    spans = [(field.offset + sum(p.nbytes for p in field.parts[:i]), field.parts[i].nbytes)
             for i in field.data]
    data_offset = r.data_offset
    for i, v in zip(field.data, new):
        field.parts[i][0] = v
    r.data.flush()
    del r, field
    with open(path, "rb") as f:
        after = f.read()
    assert len(after) == len(before), "file size changed"
    diff = [i for i in range(len(before)) if before[i] != after[i]]
    inside = {o + k for o, n in spans for k in range(n)}
    assert all(i in inside for i in diff), "bytes outside the key changed"
    assert sha256(before[data_offset:]) == sha256(after[data_offset:])
    check = GGUFReader(path)
    f = check.fields[key]
    assert [int(f.parts[i][0]) for i in f.data] == new
    print(f"{key}: {old} -> {new} ({len(diff)} bytes changed, all inside the key)")
    print(f"tensor data (from byte {data_offset}) sha256: {sha256(after[data_offset:])} (unchanged)")
    print(f"file sha256: {sha256(before)} -> {sha256(after)}")


if __name__ == "__main__":
    main()

"""File I/O of a typical Python program, for the adapter tests.

Run in a directory containing input.bin; writes several files there and
prints a report (sizes, hashes, positions) on stdout. Deterministic: the
same directory content gives the same files and the same report.
"""
import hashlib
import json
import os
import struct
import sys


def h(data):
    return hashlib.sha256(data).hexdigest()[:16]


out = []
data = open("input.bin", "rb").read()
out.append(f"input {len(data)} {h(data)}")

# Text: write, append, read lines.
with open("notes.txt", "w") as f:
    for i in range(2000):
        f.write(f"line {i:05d} {'x' * (i % 37)}\n")
with open("notes.txt", "a") as f:
    f.write("appended tail\n")
with open("notes.txt") as f:
    lines = f.readlines()
out.append(f"notes lines {len(lines)} last {lines[-1].strip()!r} size {os.path.getsize('notes.txt')}")

# Binary with seeks and in-place updates.
with open("records.bin", "wb") as f:
    for i in range(5000):
        f.write(struct.pack("<IdI", i, i * 1.5, (i * 2654435761) & 0xFFFFFFFF))
with open("records.bin", "r+b") as f:
    for i in range(0, 5000, 97):
        f.seek(i * 16 + 4)
        f.write(struct.pack("<d", -float(i)))
    f.seek(0, os.SEEK_END)
    out.append(f"records end {f.tell()}")
    f.seek(16 * 4999)
    rec = struct.unpack("<IdI", f.read(16))
    out.append(f"records last {rec}")
    f.truncate(16 * 4000)
out.append(f"records size {os.stat('records.bin').st_size}")

# Transform the input in blocks (read-through of a pre-existing file).
with open("input.bin", "rb") as src, open("transformed.bin", "wb") as dst:
    while True:
        block = src.read(100_003)
        if not block:
            break
        dst.write(bytes(reversed(block)))
out.append(f"transformed {h(open('transformed.bin', 'rb').read())}")

# JSON, write to a temporary name then rename over the final one.
doc = {"files": sorted(n for n in ["notes.txt", "records.bin", "transformed.bin"]), "sizes": [os.path.getsize(n) for n in ["notes.txt", "records.bin", "transformed.bin"]]}
with open("report.json.tmp", "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
os.replace("report.json.tmp", "report.json")
out.append(f"report exists {os.path.exists('report.json')} tmp exists {os.path.exists('report.json.tmp')}")
with open("report.json") as f:
    out.append(f"report roundtrip {json.load(f) == doc}")

# Remove a scratch file.
with open("scratch.tmp", "wb") as f:
    f.write(b"\0" * 12345)
os.remove("scratch.tmp")
out.append(f"scratch removed {not os.path.exists('scratch.tmp')}")

# Unbuffered os-level I/O.
fd = os.open("raw.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.write(fd, data[:300_000])
os.lseek(fd, 1_000_000, os.SEEK_SET)
os.write(fd, b"end")
out.append(f"raw pread {h(os.pread(fd, 1000, 299_500))} size {os.fstat(fd).st_size}")
os.close(fd)

print("\n".join(out))
sys.stdout.flush()

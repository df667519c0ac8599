"""Block-hash records (FORMAT.md L197-L202) as the tests write and read them, from the rules'
text alone, never from kvtier's code: a record is b"KVTBLKH1", u16le n, h, 0, the n hashes of h
bytes, then the u32le CRC32C of all before it; it lives in the attribute user.kvtier.block_hashes,
else at the start of a file's last 4096 bytes; it is believed only whole and ending with the file's
own key (its name)."""

import os

XATTR = "user.kvtier.block_hashes"
MAGIC = b"KVTBLKH1"


def crc32c(data):
    """CRC32C (Castagnoli, reflected), as FORMAT.md L60 and L198 use it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def encode(hashes):
    """L198: the record of `hashes` (bytes, all of one length)."""
    body = MAGIC + len(hashes).to_bytes(2, "little") + bytes([len(hashes[0]), 0]) + b"".join(hashes)
    return body + crc32c(body).to_bytes(4, "little")


def parse(data, key):
    """L200: the hashes a record at the start of `data` names, or None when it is not believed."""
    if len(data) < 16 or not data.startswith(MAGIC) or data[11] != 0:
        return None
    n, h = int.from_bytes(data[8:10], "little"), data[10]
    end = 12 + n * h
    if n < 2 or h != len(key) or n * h > 2048 or len(data) < end + 4:
        return None
    if int.from_bytes(data[end:end + 4], "little") != crc32c(data[:end]):
        return None
    hashes = [data[12 + i * h:12 + (i + 1) * h] for i in range(n)]
    return hashes if hashes[-1] == key else None


def file_blocks(path):
    """The blocks the file at `path` holds as a reader of L201 finds them: its record's, else its
    name's hash alone."""
    key = bytes.fromhex(path.stem)
    try:
        data = os.getxattr(path, XATTR)
    except OSError:
        data = b""
    if not data and path.stat().st_size > 4096:
        with open(path, "rb") as f:
            f.seek(-4096, os.SEEK_END)
            data = f.read(4096)
    return parse(data, key) or [key]

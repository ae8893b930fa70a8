"""What a count read's Redis commands cost the API process: redis-py's client CPU for reading a window's sketch
estimates as `serving.store._sketch_segments` does, on a cluster (a BITFIELD_RO of the tag's cells and a GET of N
a bucket, pipelined) and on a single server (one call of serving/sketch_reads.lua), at the bucket counts of the
windows (1 h: 60 minutes, 24 h: 24 hours), against one GET (the trending snapshot read); and the Redis
server's CPU for the same reads (INFO cpu: run it against a server nothing else uses).

A command costs the client several µs however small its reply, and a window's read sends two a bucket.

    .venv/bin/python bench/read_commands.py --redis redis://127.0.0.1:6379/15
"""

from __future__ import annotations

import argparse
import resource

import redis

from serving.store import SKETCH_READS

PREFIX = "bench:read-commands:"
SKETCH_BYTES = 2719 * 5 * 4  # the default sketch shape's counters
CELLS = (1, 2720, 5440, 8160, 10880)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu_s(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (INFO cpu)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def read(client: redis.Redis, script, buckets: int, how: str) -> int:
    """One read of `buckets` buckets, pipelined or by the script (one GET when 0: a snapshot); returns the
    commands sent."""
    sketch, total = PREFIX + "cms", PREFIX + "total"
    if buckets == 0:
        client.get(total)
        return 1
    if how == "script":
        script(keys=[sketch, total] * buckets, args=list(CELLS))
        return 1
    pipe = client.pipeline(transaction=False)
    for _ in range(buckets):
        pipe.bitfield_ro(sketch, "u32", f"#{CELLS[0]}", [("u32", f"#{c}") for c in CELLS[1:]])
        pipe.get(total)
    pipe.execute()
    return 2 * buckets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="a database for two keys of this bench")
    parser.add_argument("--reads", type=int, default=500, help="reads a point")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    script = client.register_script(SKETCH_READS)
    client.set(PREFIX + "cms", b"\x00" * SKETCH_BYTES)
    client.set(PREFIX + "total", b"123456")
    try:
        points = {"a snapshot GET": (0, ""), "1 h window, pipelined": (60, "pipeline"),
                  "1 h window, one script": (60, "script"), "24 h window, pipelined": (24, "pipeline"),
                  "24 h window, one script": (24, "script")}
        for label, (buckets, how) in points.items():
            cpu, server, commands = [], [], 0
            for _ in range(args.rounds):
                started, served = cpu_s(), server_cpu_s(client)
                for _ in range(args.reads):
                    commands = read(client, script, buckets, how)
                cpu.append((cpu_s() - started) / args.reads * 1e3)
                server.append((server_cpu_s(client) - served) / args.reads * 1e3)
            print(f"{label:24} {commands:4} commands: client CPU {min(cpu):.3f} ms a read (best of rounds "
                  f"{', '.join(f'{c:.3f}' for c in cpu)}), Redis {min(server):.3f} ms")
    finally:
        client.delete(PREFIX + "cms", PREFIX + "total")
        client.close()


if __name__ == "__main__":
    main()

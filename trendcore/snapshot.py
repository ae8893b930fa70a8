"""The trending snapshot: one model the materializer writes and the API serves (GET /trending)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TrendEntry(BaseModel):
    """One ranked tag of a trending list, with its bounds and where its count came from."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(description="1 is the top.")
    tag: str = Field(description="The counting key.")
    display: str = Field(description="The first spelling seen (e.g. WorldCup for worldcup).")
    count: int = Field(description="Estimate; also the upper bound (a sketch never undercounts).")
    upper_bound: int
    lower_bound: int
    source: str = Field(description="exact, approx or mixed")
    authors: int = Field(description="Distinct authors worldwide over the window's whole hours (HyperLogLog), "
                         "at most `count`.")
    rank_change: int | None = Field(description="positive: moved up; null: new in the list")
    score: float | None = Field(description="Rise score (count + a) / (baseline + b); null in volume lists.")
    baseline: float | None = Field(description="Expected count for this hour of week; null in volume lists.")
    settled: bool = Field(False, description="The entry's [lower_bound, upper_bound] overlaps neither the previous "
                          "nor the next entry's: the true counts cannot swap it with a neighbour. false: its place "
                          "among its neighbours is within the sketch's error (false in snapshots written before "
                          "this field).")


class ReplayedPartition(BaseModel):
    """One partition the speed layer replays: from which offset, up to which, and how far it has got."""

    model_config = ConfigDict(extra="forbid")

    topic: str
    partition: int
    from_offset: int = Field(description="Where the replay started (the stored checkpoint, or the kept hours' start).")
    target_offset: int = Field(description="The log's end when the partition was positioned: the replay's goal.")
    reached_offset: int = Field(description="The next offset the last checkpoint stored.")


class Rebuilding(BaseModel):
    """The speed layer is replaying partitions (after Redis lost data, or a new owner catching up on a long
    backlog): its counts of the kept windows are low until it has caught up."""

    model_config = ConfigDict(extra="forbid")

    partitions: list[ReplayedPartition]
    progress: float = Field(ge=0.0, le=1.0, description="Share of the rebuilding partitions' records replayed so "
                            "far, 0 <= progress < 1.")


class Snapshot(BaseModel):
    """A trending list of a region, window (1h|24h) and rank (volume|rise), as stored in Redis."""

    model_config = ConfigDict(extra="forbid")

    region: str
    window: str
    rank: str
    computed_at: str = Field(description="RFC 3339, UTC.")
    computed_at_ms: int
    total: int = Field(description="Mentions in the window (N of the eps * N bound).")
    error_bound: int = Field(description="eps * N: how far an approximate count may be above the truth.")
    entries: list[TrendEntry]
    rebuilding: Rebuilding | None = Field(None, description="Not null while the speed layer replays partitions "
                                          "(after Redis lost data, or a long backlog): the counts are low until it "
                                          "caught up.")

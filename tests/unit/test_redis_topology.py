"""Redis topologies (redis.mode): settings that cannot work are refused in plain words, each mode builds its
client without connecting, and the key names put what one command or one RENAME touches in one hash slot."""

from __future__ import annotations

import os

import pytest
import redis
from pydantic import ValidationError
from redis.cluster import key_slot
from redis.exceptions import RedisClusterException
from redis.sentinel import SentinelConnectionPool

from adapters import redis as redis_io
from trendcore.errors import ConfigError, ServiceError
from trendcore.keys import KeySpace, hash_tag
from trendcore.settings import RedisSettings, Settings, StackSettings, to_env
from trends.stack import redis_cluster


def slot(name: str) -> int:
    return key_slot(name.encode())


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.upper().startswith("TRENDS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_single_is_the_default_mode():
    assert RedisSettings().mode == "single"
    assert isinstance(redis_io.client(RedisSettings()), redis.Redis)


@pytest.mark.parametrize(("fields", "words"), [
    ({"mode": "sentinel", "master_name": "trends"}, "TRENDS_REDIS__SENTINELS"),
    ({"mode": "sentinel", "sentinels": "10.0.0.1:26379"}, "TRENDS_REDIS__MASTER_NAME"),
    ({"mode": "sentinel", "sentinels": "10.0.0.1", "master_name": "t"}, "'10.0.0.1' is not host:port"),
    ({"mode": "sentinel", "sentinels": "a:1,b:x", "master_name": "t"}, "'b:x' is not host:port"),
    ({"sentinels": "10.0.0.1:26379"}, "TRENDS_REDIS__SENTINELS set but TRENDS_REDIS__MODE=single"),
    ({"mode": "cluster", "master_name": "trends"}, "TRENDS_REDIS__MASTER_NAME set but TRENDS_REDIS__MODE=cluster"),
    ({"mode": "cluster", "url": "redis://127.0.0.1:7000/3"}, "database 3, but Redis Cluster has only database 0"),
    ({"mode": "cluster", "url": "redis://127.0.0.1:7000?db=2"}, "database 2"),
])
def test_inconsistent_topology_settings_are_refused(fields, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        RedisSettings(**fields)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValidationError, match="mode"):
        RedisSettings(mode="replicated")


def test_consistent_topology_settings_pass():
    assert RedisSettings(mode="cluster", url="redis://10.0.0.5:7000").database() == 0
    assert RedisSettings(mode="cluster", url="rediss://10.0.0.5:7000/0").mode == "cluster"
    sentinel = RedisSettings(mode="sentinel", sentinels=" 10.0.0.1:26379, [::1]:26380 ,", master_name="trends")
    assert sentinel.sentinel_addresses() == [("10.0.0.1", 26379), ("::1", 26380)]


def test_modes_and_cluster_ports_come_from_the_environment(clean_env, monkeypatch):
    monkeypatch.setenv("TRENDS_REDIS__MODE", "sentinel")
    monkeypatch.setenv("TRENDS_REDIS__SENTINELS", "s1:26379,s2:26379")
    monkeypatch.setenv("TRENDS_REDIS__MASTER_NAME", "trends")
    monkeypatch.setenv("TRENDS_STACK__REDIS_CLUSTER_PORTS", "[17001, 17002, 17003]")
    settings = Settings()
    assert settings.redis.sentinel_addresses() == [("s1", 26379), ("s2", 26379)]
    assert settings.stack.redis_cluster_ports == [17001, 17002, 17003]
    env = to_env(settings)
    assert env["TRENDS_STACK__REDIS_CLUSTER_PORTS"] == "[17001, 17002, 17003]"
    monkeypatch.delenv("TRENDS_REDIS__SENTINELS")
    with pytest.raises(ConfigError, match="TRENDS_REDIS__SENTINELS"):
        Settings()


@pytest.mark.parametrize("ports", [[17001, 17002], [17001, 17001, 17002]])
def test_a_local_cluster_needs_three_distinct_ports(ports):
    with pytest.raises(ConfigError, match="at least 3 distinct ports"):
        StackSettings(redis_cluster_ports=ports)


def test_a_nodes_bus_port_is_the_configured_one_or_its_port_plus_ten_thousand(clean_env):
    default = Settings(stack=StackSettings(redis_cluster_ports=[17001, 17002, 17003]))
    assert [redis_cluster.bus_port(default, i) for i in (1, 2, 3)] == [27001, 27002, 27003]
    own = Settings(stack=StackSettings(redis_cluster_ports=[17001, 17002, 17003],
                                       redis_cluster_bus_ports=[16001, 16002, 16003]))
    assert [redis_cluster.bus_port(own, i) for i in (1, 2, 3)] == [16001, 16002, 16003]


def test_bus_ports_pair_one_to_one_with_the_node_ports():
    with pytest.raises(ConfigError, match="one bus port for each"):
        StackSettings(redis_cluster_ports=[17001, 17002, 17003], redis_cluster_bus_ports=[16001, 16002])


def test_the_cluster_client_connects_on_first_use_and_its_errors_become_service_errors():
    client = redis_io.client(RedisSettings(mode="cluster", url="redis://127.0.0.1:1/0", retries=0),
                             socket_connect_timeout=0.5)
    assert redis_io.is_cluster(client)  # built: nothing was asked of port 1 yet
    with pytest.raises(ServiceError, match="must name a reachable node"), redis_io.redis_errors("PING"):
        client.ping()


def test_cluster_exceptions_outside_redis_error_are_wrapped():
    with pytest.raises(ServiceError, match="Redis: MGET failed: keys"), redis_io.redis_errors("MGET"):
        raise RedisClusterException("keys of several slots")


def test_the_sentinel_client_carries_credentials_tls_and_database_to_the_master(tmp_path):
    ca = tmp_path / "ca.crt"
    settings = RedisSettings(mode="sentinel", sentinels="127.0.0.1:26379", master_name="trends",
                             url="rediss://mymaster/4", username="trends", password="s3cret", ca_file=ca,
                             sentinel_password="watch")
    client = redis_io.client(settings)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "trends"
    node = pool.connection_kwargs
    assert (node["username"], node["password"], node["db"], node["ssl_ca_certs"]) == ("trends", "s3cret", 4, str(ca))
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    assert node["retry"].get_retries() == settings.retries
    assert pool.sentinel_manager.sentinel_kwargs == {"socket_timeout": 10, "socket_connect_timeout": 5, "ssl": True,
                                                     "ssl_ca_certs": str(ca), "password": "watch"}


def test_a_staging_name_hashes_to_its_views_slot_whatever_the_run_id():
    space = KeySpace("trends:")
    views = [space.exact_hour("US", 7), space.exact_day("all", 3), space.exact_meta("US", "h", 7),
             space.exact_top_posts("worldcup", 3), space.baseline("all", 5)]
    for run_id in ("cli-hourly-1a2b", "trends_hourly/scheduled__2026-01-01T00:00:00+00:00/try1", "odd{run}"):
        for view in views:
            assert slot(space.staging(run_id, view)) == slot(view), (run_id, view)
    assert space.staging("r1", space.exact_hour("US", 7)) == "trends:tmp:r1:{trends:exact:US:h:7}"
    with pytest.raises(ValueError, match="no hash tag"):
        space.staging("r1", "odd}name")


def test_keys_one_command_reads_together_share_a_slot():
    space = KeySpace()
    for merged in (space.merged_authors, space.merged_top_posts, space.merged_new_posts):  # one MGET per tag
        assert len({slot(merged("worldcup", h)) for h in range(491_000, 491_024)}) == 1, merged
    assert len({slot(space.baseline("US", how)) for how in range(168)}) == 1  # COPY between hours of week
    assert len({slot(space.exact_hour("US", h)) for h in range(491_000, 491_024)}) > 1  # views spread


def test_hash_tags_are_read_as_redis_cluster_reads_them():
    assert hash_tag("baseline:{all}:how:5") == "all"
    assert hash_tag("a{}b{c}") is None and hash_tag("plain") is None and hash_tag("x{y") is None
    assert hash_tag("{a}{b}") == "a"

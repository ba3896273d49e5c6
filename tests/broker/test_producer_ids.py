"""Producer ids never repeat: across restarts (durable blocks) and across brokers (id spaces)."""

from __future__ import annotations

from broker.producer_ids import LocalBlockSource, ProducerIdManager


def test_ids_are_unique_across_restarts_and_crashes(tmp_path):
    path = tmp_path / "kbroker-producer-id-block"
    seen = set()
    for restart in range(5):
        manager = ProducerIdManager(LocalBlockSource(path, broker_id=7, block_size=10))
        for _ in range(13 if restart % 2 else 3):  # crossing block boundaries, or abandoning a block
            pid = manager.generate_producer_id()
            assert pid not in seen
            seen.add(pid)
    assert all(7 << 32 <= pid < 8 << 32 for pid in seen)


def test_brokers_have_disjoint_id_spaces(tmp_path):
    a = ProducerIdManager(LocalBlockSource(tmp_path / "a", broker_id=1))
    b = ProducerIdManager(LocalBlockSource(tmp_path / "b", broker_id=2))
    ids_a = {a.generate_producer_id() for _ in range(2500)}
    ids_b = {b.generate_producer_id() for _ in range(2500)}
    assert len(ids_a) == len(ids_b) == 2500 and not ids_a & ids_b


def test_block_is_written_before_it_is_used(tmp_path):
    path = tmp_path / "f"
    manager = ProducerIdManager(LocalBlockSource(path, broker_id=0, block_size=100))
    first = manager.generate_producer_id()
    assert path.read_text() == f"v1 {first + 100}\n"

"""The records of ``__transaction_state`` byte for byte (Kafka's TransactionLogKey v0 and
TransactionLogValue v0: int16 version, then the fields in order, non-flexible)."""

import struct

import pytest

from protocol.messages.transactions import (TxnLogValue, read_transaction_log_key, read_transaction_log_value,
                                            transaction_log_key, transaction_log_value)
from protocol.schema import SchemaError


def test_key_bytes():
    assert transaction_log_key("tx-1") == struct.pack(">hh", 0, 4) + b"tx-1"
    assert read_transaction_log_key(transaction_log_key("tx-1")) == "tx-1"
    with pytest.raises(SchemaError):
        read_transaction_log_key(struct.pack(">hh", 1, 0))


def test_value_bytes():
    v = TxnLogValue(7, 3, 60000, 1, (("a", 0), ("a", 2), ("b", 1)), 1000, 900)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 1000, 900))
    assert transaction_log_value(v) == expected
    assert read_transaction_log_value(expected) == v
    # an empty transaction: an empty partition list
    empty = TxnLogValue(7, 3, 60000, 0, (), 1000, -1)
    assert read_transaction_log_value(transaction_log_value(empty)) == empty

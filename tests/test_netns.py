"""The network-namespace test hosts themselves: a server in one host is reachable from the
root namespace and from a peer host, and after ``cut`` only from the root namespace."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.netns import NetnsNetwork, netns_available

SERVER = "import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);" \
         "s.bind((sys.argv[1],7777));s.listen();print('up',flush=True)\n" \
         "while True:\n c,_=s.accept();c.sendall(b'hi');c.close()"
CLIENT = "import socket,sys\ntry:\n c=socket.create_connection((sys.argv[1],7777),timeout=1);print(c.recv(2).decode())\n" \
         "except OSError as e: print('fail')"


def test_cut_drops_traffic_between_hosts_but_not_from_the_root_namespace():
    reason = netns_available()
    if reason is not None:
        pytest.fail(reason)
    with NetnsNetwork(2) as net:
        a, b = net.hosts
        server = subprocess.Popen(a.exec_prefix() + [sys.executable, "-c", SERVER, a.address],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "up"

            def from_b():
                return subprocess.run(b.exec_prefix() + [sys.executable, "-c", CLIENT, a.address],
                                      capture_output=True, text=True, timeout=10).stdout.strip()

            def from_root():
                return subprocess.run([sys.executable, "-c", CLIENT, a.address],
                                      capture_output=True, text=True, timeout=10).stdout.strip()

            assert from_b() == "hi" and from_root() == "hi"
            net.cut(a, b)
            assert from_b() == "fail" and from_root() == "hi"
            net.heal(a, b)
            assert from_b() == "hi"
        finally:
            server.kill()
            server.wait()

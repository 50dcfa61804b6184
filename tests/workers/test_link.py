"""A worker's link (:mod:`workers.link`): a pipe's end for a descriptor, ZeroMQ for an endpoint, and both say
``LinkClosed`` when they can send no more."""

from __future__ import annotations

import socket

import pytest
import zmq

from aioenv.transport.pipe import LinkClosed, PipeLink
from workers.link import open_link
from workers.zmq_link import ZmqLink


def test_a_descriptor_opens_a_pipes_end_and_an_endpoint_a_zeromq_socket() -> None:
    ours, theirs = socket.socketpair()
    link = open_link(theirs.detach(), "w-0")
    try:
        assert isinstance(link, PipeLink)
    finally:
        link.close()
        ours.close()
    remote = open_link("tcp://127.0.0.1:9", "w-1")
    try:
        assert isinstance(remote, ZmqLink)
        assert remote.sock.getsockopt(zmq.IDENTITY) == b"w-1"
    finally:
        remote.close()


def test_a_zeromq_link_that_can_send_no_more_says_it_is_closed_as_a_pipe_does() -> None:
    # (a thread worker's last replies are dropped on LinkClosed, whichever link it has)
    link = ZmqLink("tcp://127.0.0.1:9", "w-2")
    link.sock.close()
    with pytest.raises(LinkClosed, match="cannot send") as caught:
        link.send([b"reply"])
    assert isinstance(caught.value.__cause__, zmq.ZMQError)
    ours, theirs = socket.socketpair()
    pipe = PipeLink(theirs.detach())
    ours.close()
    with pytest.raises(LinkClosed):
        pipe.send([b"reply" * 100_000])
    pipe.close()

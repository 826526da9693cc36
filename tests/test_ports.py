"""apex.ports.wait_until_listening: an actor's first call to the learner waits
for its port instead of gRPC's reconnect back-off (issue 27)."""

import socket
import threading
import time

from apex.ports import wait_until_listening


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_returns_once_a_server_listens_on_the_port():
    port = _free_port()
    asked = threading.Event()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        asked.wait()
        server.bind(("localhost", port))
        server.listen()

    thread = threading.Thread(target=listen_later)
    thread.start()
    polls = []

    def should_stop() -> bool:  # called between refused polls: start listening after the first
        polls.append(1)
        asked.set()
        return False

    try:
        assert wait_until_listening(f"localhost:{port}", time.time() + 60, should_stop)
        assert polls  # it was refused at least once before the server listened
    finally:
        thread.join()
        server.close()


def test_gives_up_at_the_deadline_or_a_stop_request():
    port = _free_port()  # nothing listens there
    assert not wait_until_listening(f"localhost:{port}", time.time() - 1)
    assert not wait_until_listening(f"localhost:{port}", time.time() + 60, lambda: True)

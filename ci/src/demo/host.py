# The lab host's side of the demo: plain Linux sockets in the lab's namespace, talking to
# guest a's qpip device. Run by the demo as
#   python3 -c SCRIPT SHARED HOST_ADDR GUEST_ADDR BYTES TCP_PORT UDP_PORT GUEST_PORT
# SHARED is the folder the guests see at /lab. It:
#  - listens on [HOST_ADDR]:TCP_PORT and echoes one TCP connection back until its end;
#  - echoes every UDP datagram to [HOST_ADDR]:UDP_PORT;
#  - creates /lab/host-listening once both are bound;
#  - once guest a creates /lab/a-listening, connects to [GUEST_ADDR]:GUEST_PORT, sends
#    BYTES random bytes while reading what the guest sends, and writes
#    "SHA256-SENT SHA256-RECEIVED" to /lab/host-in.done;
#  - ends when guest a creates /lab/a-done. Errors: one line on stderr, exit status 1.
import hashlib
import os
import socket
import sys
import threading
import time

shared, host, guest = sys.argv[1], sys.argv[2], sys.argv[3]
nbytes, tcp_port, udp_port, guest_port = (int(x) for x in sys.argv[4:8])
LIMIT = 180  # seconds for any one wait
errors = []


def say(msg):
    print(f"host: {msg}", flush=True)


def note(name, text=""):
    tmp = os.path.join(shared, "." + name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(shared, name))


def wait_file(name):
    end = time.monotonic() + LIMIT
    while not os.path.exists(os.path.join(shared, name)):
        if os.path.exists(os.path.join(shared, "a-done")):
            raise RuntimeError(f"guest a ended before creating /lab/{name}")
        if time.monotonic() > end:
            raise RuntimeError(f"/lab/{name} did not appear within {LIMIT} s")
        time.sleep(0.05)


def guarded(what, f):
    def run():
        try:
            f()
        except Exception as e:  # reported, and the exit status says so
            errors.append(f"{what}: {e}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def tcp_echo(listener):
    conn, peer = listener.accept()
    conn.settimeout(LIMIT)
    n = 0
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
        n += len(data)
    conn.shutdown(socket.SHUT_WR)
    conn.close()
    say(f"TCP echo: {n} bytes from [{peer[0]}]:{peer[1]} sent back")


def udp_echo(sock):
    n = 0
    while True:
        data, peer = sock.recvfrom(65536)
        sock.sendto(data, peer)
        n += 1
        if n == 1:
            say(f"UDP echo: first datagram from [{peer[0]}]:{peer[1]}")


def connect_to_guest():
    wait_file("a-listening")
    payload = os.urandom(nbytes)
    conn = socket.create_connection((guest, guest_port), timeout=LIMIT)
    received = bytearray()

    def send():
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)

    sender = guarded("sending to the guest", send)
    while True:
        data = conn.recv(65536)
        if not data:
            break
        received += data
    sender.join(LIMIT)
    conn.close()
    sent_sha = hashlib.sha256(payload).hexdigest()
    got_sha = hashlib.sha256(received).hexdigest()
    note("host-in.done", f"{sent_sha} {got_sha}\n")
    say(f"TCP to [{guest}]:{guest_port}: sent {nbytes} bytes, received {len(received)}")


listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((host, tcp_port))
listener.listen(1)
listener.settimeout(LIMIT)
udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
udp.bind((host, udp_port))
note("host-listening")
say(f"listening on TCP and UDP [{host}]:{tcp_port},{udp_port}")
guarded("TCP echo", lambda: tcp_echo(listener))
guarded("UDP echo", lambda: udp_echo(udp))
client = guarded("TCP to the guest", connect_to_guest)
client.join(LIMIT + 10)
try:
    wait_file("a-done")
except RuntimeError:
    pass
if errors:
    for e in errors:
        print(f"host: error: {e}", file=sys.stderr)
    sys.exit(1)

# Helper of the preload tests: a TCP and UDP echo server. `echo.py ADDR PORT` echoes what each
# connection sends and closes it at EOF, and sends each datagram to PORT back to its source;
# prints "listening" once it listens.
import socket, sys, threading
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
u = socket.socket(fam, socket.SOCK_DGRAM)
u.bind((sys.argv[1], int(sys.argv[2])))
def udp_echo():
    while True:
        d, src = u.recvfrom(65536)
        u.sendto(d, src)
threading.Thread(target=udp_echo, daemon=True).start()
print("listening", flush=True)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()

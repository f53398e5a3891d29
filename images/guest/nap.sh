# Sourced by the guest's shell scripts (lab-wait, the bench's guest scripts):
# `nap` waits 0.1 s without starting a process. It reads the FIFO /run/nap, which /init
# makes and nobody writes, with a timeout. A waiting loop that forks `sleep` ten times a
# second keeps a TCG guest's CPU about 12 % busy, its vCPU's host thread runnable beside
# the guest being measured; this way, under 2 %.
nap() { read -t 0.1 NAP <>/run/nap || :; }

/* The cost of waking a sleeping process on this machine: two processes ping-pong one byte over a socketpair,
 * each blocking in poll(2) between messages (no spinning). Half the round trip is one wake-up; a remote read
 * through the daemons takes four (docs/daemon.md, "Progress"). By hand: cc -O2 wakeup_pingpong.c && ./a.out */
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void wait_readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  poll(&p, 1, -1);
}

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) return perror("socketpair"), 1;
  char b = 1;
  pid_t child = fork();
  if (child == 0) {
    for (;;) {
      wait_readable(sv[1]);
      if (read(sv[1], &b, 1) <= 0 || b == 0) _exit(0);
      if (write(sv[1], &b, 1) != 1) _exit(1);
    }
  }
  const int n = 20000;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) {
    if (write(sv[0], &b, 1) != 1) return perror("write"), 1;
    wait_readable(sv[0]);
    if (read(sv[0], &b, 1) != 1) return perror("read"), 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  b = 0;
  if (write(sv[0], &b, 1) != 1) return 1;
  waitpid(child, NULL, 0);
  double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n / 1e3;
  printf("blocking round trip: %.2f us (one wake-up ~%.2f us)\n", us, us / 2);
  return 0;
}

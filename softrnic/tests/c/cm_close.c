/* A thread waits in rdma_get_cm_event while another destroys its channel, as rping's event
 * thread does at the end of every run. With the kernel's rdma_cm the waiter sleeps on (its
 * read holds the channel's file open) until the process ends; it must not wake with an error,
 * which rping's thread answers with exit(-1) before main returns 0. Then a thread comes into
 * rdma_get_cm_event only after its channel was destroyed, as rping's does when it is slow to
 * loop back after its last event: it sleeps on too. Prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)

static pid_t waiter_tid;

static void *waiter(void *channel)
{
	__atomic_store_n(&waiter_tid, gettid(), __ATOMIC_RELEASE);
	struct rdma_cm_event *ev;
	int r = rdma_get_cm_event(channel, &ev);
	fprintf(stderr, "rdma_get_cm_event returned %d (errno %d)\n", r, errno);
	exit(2);
}

/* The system call thread `tid` is in, or -1 while it runs. */
static long syscall_of(pid_t tid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
	FILE *f = fopen(path, "r");
	CHECK(f);
	long nr = -1;
	if (fgets(line, sizeof line, f) && line[0] != 'r')
		nr = strtol(line, NULL, 10);
	fclose(f);
	return nr;
}

static void wait_for_syscall(pid_t tid, long nr)
{
	while (syscall_of(tid) != nr)
		usleep(1000);
}

/* Starts a thread waiting in `channel`; its thread id. */
static pid_t start_waiter(struct rdma_event_channel *channel)
{
	__atomic_store_n(&waiter_tid, 0, __ATOMIC_RELEASE);
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, waiter, channel));
	pid_t tid;
	while (!(tid = __atomic_load_n(&waiter_tid, __ATOMIC_ACQUIRE)))
		usleep(1000);
	return tid;
}

int main(void)
{
	alarm(60); /* a bound for the test, not a timeout of the protocol */
	struct rdma_event_channel *channel = rdma_create_event_channel();
	CHECK(channel);
	pid_t tid = start_waiter(channel);
	wait_for_syscall(tid, SYS_read);

	/* A second descriptor of the channel's pipe sees its end: the daemon has let the channel
	 * go, and the waiter was woken. */
	int fd = dup(channel->fd);
	CHECK(fd >= 0);
	rdma_destroy_event_channel(channel);
	char byte;
	CHECK(read(fd, &byte, 1) == 0);
	/* It goes back to sleep, for good. */
	wait_for_syscall(tid, SYS_futex);

	channel = rdma_create_event_channel();
	CHECK(channel);
	rdma_destroy_event_channel(channel);
	wait_for_syscall(start_waiter(channel), SYS_futex);
	printf("ok\n");
	return 0;
}

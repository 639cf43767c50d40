/* A thread blocked in ibv_get_async_event while another closes the device: the wait ends
 * with -1 and EIO, as the kernel's async event file ends once its device file is released,
 * and the close returns 0 after it. Prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static struct ibv_context *ctx;
static atomic_int tid;
static int result, error;

static void *waiter(void *unused)
{
	(void)unused;
	struct ibv_async_event e;
	atomic_store(&tid, gettid());
	result = ibv_get_async_event(ctx, &e);
	error = errno;
	return NULL;
}

/* Whether thread `t` sleeps (in the kernel: the wait's read). */
static int sleeping(int t)
{
	char path[64], state = 0;
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", t);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int ok = fscanf(f, "%*d (%*[^)]) %c", &state) == 1;
	fclose(f);
	return ok && state == 'S';
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0]);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, waiter, NULL));
	while (!atomic_load(&tid) || !sleeping(atomic_load(&tid)))
		usleep(1000);
	CHECK(ibv_close_device(ctx) == 0);
	CHECK(!pthread_join(t, NULL));
	if (result != -1 || error != EIO) {
		fprintf(stderr, "ibv_get_async_event gave %d, errno %d\n", result, error);
		return 1;
	}
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}

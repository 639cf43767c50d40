/* Registered memory shared with the daemon: two RC QPs of one device, connected to each other,
 * WRITE, READ and FETCH_ADD between regions that start and end mid-page, so that each message
 * lands partly in pages the daemon maps and partly in bytes it reaches with system calls. Also:
 * a second region inside the first shares its pages and outlives it; the pages move back when
 * their last region goes, and again when registered again; a region on the stack is not shared;
 * a child after fork gets its own copy; a region registered while another thread runs is shared
 * only with SOFTRNIC_SHARED_MR=1, and none is with SOFTRNIC_SHARED_MR=0. A library that watches
 * the program's memory by interposing mmap and mremap (libfabric's memhooks) sees none of it.
 * Prints "shared_mr: ok", or what went wrong and exits 1. */
#define PROGRAM "shared_mr"
#include "loopback.h"
#include <pthread.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SIZE = 3 * 4096 + 1000, ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

/* How many mappings of this process are pages moved for the daemon. */
static int shared_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "softrnic-mr") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* mmap and mremap as a memory monitor interposes them: the calls other libraries make through
 * them, while `watching`, are counted. */
static int watching, watched;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	watched += watching;
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	void *to = va_arg(ap, void *);
	va_end(ap);
	watched += watching;
	return (void *)syscall(SYS_mremap, old, old_len, len, flags, to);
}

/* How many of `n` moved mappings there should be: none with SOFTRNIC_SHARED_MR=0. */
static int never, always;
static int want(int n)
{
	return never ? 0 : n;
}

static void expect_shared(int n, const char *what)
{
	if (shared_mappings() != want(n))
		FAIL("%s: %d regions' pages shared, want %d", what, shared_mappings(), want(n));
}

static void *blocked(void *fd)
{
	char c;
	return (void *)(intptr_t)read(*(int *)fd, &c, 1);
}

static void fill(unsigned char *p, int len, int seed)
{
	for (int i = 0; i < len; i++)
		p[i] = (unsigned char)(i * seed + seed);
}

/* A WRITE of `len` bytes from `src` to `dst` and a READ back into `back`, each checked. */
static void write_and_read(struct ibv_qp *qp, unsigned char *src, struct ibv_mr *smr,
			   unsigned char *dst, struct ibv_mr *dmr, unsigned char *back,
			   struct ibv_mr *bmr, int len, const char *what)
{
	if (rdma(qp, IBV_WR_RDMA_WRITE, (uintptr_t)src, len, smr->lkey, (uintptr_t)dst,
		 dmr->rkey) != IBV_WC_SUCCESS)
		FAIL("%s: WRITE failed", what);
	if (memcmp(dst, src, len))
		FAIL("%s: WRITE landed wrong", what);
	if (rdma(qp, IBV_WR_RDMA_READ, (uintptr_t)back, len, bmr->lkey, (uintptr_t)dst,
		 dmr->rkey) != IBV_WC_SUCCESS)
		FAIL("%s: READ failed", what);
	if (memcmp(back, src, len))
		FAIL("%s: READ came back wrong", what);
}

int main(void)
{
	const char *mode = getenv("SOFTRNIC_SHARED_MR");
	never = mode && !strcmp(mode, "0");
	always = mode && !strcmp(mode, "1");
	struct ibv_qp *a, *b;
	struct ibv_pd *pd = loopback(&a, &b);
	struct ibv_qp_attr atomics = {.qp_access_flags = ACCESS};
	if (ibv_modify_qp(b, &atomics, IBV_QP_ACCESS_FLAGS))
		FAIL("allow atomics");
	watching = 1;

	/* Mid-page starts: each region has whole pages in its middle, and edges. */
	unsigned char *src = (unsigned char *)aligned_alloc(4096, SIZE + 4096) + 100;
	unsigned char *dst = (unsigned char *)aligned_alloc(4096, SIZE + 4096) + 200;
	unsigned char *back = (unsigned char *)aligned_alloc(4096, SIZE + 4096) + 300;
	fill(src, SIZE, 7);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, SIZE, ACCESS);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, SIZE, ACCESS);
	struct ibv_mr *bmr = ibv_reg_mr(pd, back, SIZE, ACCESS);
	if (!smr || !dmr || !bmr)
		FAIL("ibv_reg_mr");
	expect_shared(3, "three regions");
	if (memcmp(src, (unsigned char[]){7, 14, 21}, 3))
		FAIL("registering changed the bytes");

	write_and_read(a, src, smr, dst, dmr, back, bmr, SIZE, "whole regions");
	/* The program's own stores after registration are what the daemon reads. */
	fill(src, SIZE, 11);
	write_and_read(a, src + 50, smr, dst + 4000, dmr, back + 10, bmr, 5000, "mid-region");

	/* A FETCH_ADD on a word in the shared pages, and one at an edge. */
	uint64_t *word = (uint64_t *)(dst + 4096 - 200 + 8), *edge = (uint64_t *)(dst);
	*word = 40, *edge = 1000;
	uint64_t *old = (uint64_t *)back;
	struct ibv_sge sge = {.addr = (uintptr_t)old, .length = 8, .lkey = bmr->lkey};
	for (int i = 0; i < 2; i++) {
		uint64_t *target = i ? edge : word;
		struct ibv_send_wr wr = {
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.atomic = {.remote_addr = (uintptr_t)target, .compare_add = 2,
				      .rkey = dmr->rkey},
		}, *bad;
		struct ibv_wc wc;
		if (ibv_post_send(a, &wr, &bad))
			FAIL("post FETCH_ADD");
		while (ibv_poll_cq(cq, 1, &wc) == 0)
			;
		if (wc.status != IBV_WC_SUCCESS || *old != (i ? 1000u : 40u) ||
		    *target != (i ? 1002u : 42u))
			FAIL("FETCH_ADD %d: %s, old %lu, now %lu", i, ibv_wc_status_str(wc.status),
			     (unsigned long)*old, (unsigned long)*target);
	}

	/* A second region inside the first shares its pages, and outlives it. */
	struct ibv_mr *inner = ibv_reg_mr(pd, dst + 4096 - 200, 8192, ACCESS);
	if (!inner)
		FAIL("ibv_reg_mr inside");
	expect_shared(3, "a region inside");
	if (ibv_dereg_mr(dmr))
		FAIL("ibv_dereg_mr");
	fill(src, SIZE, 13);
	write_and_read(a, src, smr, dst + 4096 - 200, inner, back, bmr, 8192, "inner region");
	if (ibv_dereg_mr(inner))
		FAIL("ibv_dereg_mr");
	expect_shared(2, "its last region gone");
	if (memcmp(dst + 4096 - 200, src, 8192))
		FAIL("the pages moved back lost their bytes");

	/* Registered again: moved again. */
	dmr = ibv_reg_mr(pd, dst, SIZE, ACCESS);
	if (!dmr)
		FAIL("ibv_reg_mr again");
	expect_shared(3, "registered again");
	fill(src, SIZE, 17);
	write_and_read(a, src, smr, dst, dmr, back, bmr, SIZE, "registered again");

	/* A child gets a copy: its stores stay its own, and it has no pages of the daemon's. */
	pid_t child = fork();
	if (child == 0) {
		int ok = shared_mappings() == 0 && !memcmp(dst, src, SIZE);
		dst[4096] ^= 0xff;
		_exit(ok ? 0 : 1);
	}
	int status;
	if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		FAIL("the child's copy after fork (status %d)", status);
	if (memcmp(dst, src, SIZE))
		FAIL("a child's store reached its parent's memory");
	expect_shared(3, "after fork");
	fill(src, SIZE, 19);
	write_and_read(a, src, smr, dst, dmr, back, bmr, SIZE, "after fork");

	/* Another thread: moved only when the program asks for it. */
	int pipefd[2];
	pthread_t other;
	if (pipe(pipefd) || pthread_create(&other, NULL, blocked, &pipefd[0]))
		FAIL("a thread");
	unsigned char *threaded = aligned_alloc(4096, 2 * 4096);
	struct ibv_mr *tmr = ibv_reg_mr(pd, threaded, 2 * 4096, ACCESS);
	if (!tmr)
		FAIL("ibv_reg_mr with a thread");
	expect_shared(always ? 4 : 3, "with another thread");
	write_and_read(a, src, smr, threaded, tmr, back, bmr, 2 * 4096, "with another thread");
	ibv_dereg_mr(tmr);
	close(pipefd[1]);
	pthread_join(other, NULL);

	/* On the stack: never shared. */
	unsigned char stack[2 * 4096 + 512];
	struct ibv_mr *stmr = ibv_reg_mr(pd, stack, sizeof(stack), ACCESS);
	if (!stmr)
		FAIL("ibv_reg_mr on the stack");
	write_and_read(a, src, smr, stack, stmr, back, bmr, sizeof(stack), "stack");
	expect_shared(3, "on the stack");
	ibv_dereg_mr(stmr);
	ibv_dereg_mr(dmr);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(bmr);
	expect_shared(0, "all gone");
	if (watched)
		FAIL("a memory monitor saw %d mmap or mremap calls", watched);
	printf("shared_mr: ok\n");
	return 0;
}

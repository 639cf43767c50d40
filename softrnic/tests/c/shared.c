/* What one user's programs can do to another's on a shared daemon, and what a PID reused after
 * a program exits can be made to receive. One mode per run:
 *   hold            registers a page of 'A's, prints "RKEY ADDR", and when its input closes,
 *                   prints "hold: intact" if the page is unchanged
 *   steal RKEY ADDR READs and WRITEs that memory through a loopback pair of its own; prints
 *                   each completion's status ("steal: read <status>, write <status>")
 *   limits          creates QPs, then registers 256 KiB regions, until each fails; prints
 *                   "limits: N qps (errno E), M mrs (errno F)"
 *   reuse           registers two pages at FIXED (page 0 'A's, page 1 'a's), then forks: the
 *                   parent prints "reuse: pid P" and exits; the child waits for a line on its
 *                   input, WRITEs page 0 onto page 1 through its loopback pair, and prints
 *                   "reuse: write <status>"
 *   victim          maps the same two pages (page 0 'V's, page 1 'v's), prints "victim: ready",
 *                   and when its input closes prints "victim: intact" or "victim: written"
 * Errors go to stderr with exit status 1. */
#define _GNU_SOURCE
#define PROGRAM "shared"
#include "loopback.h"
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

enum { PAGE = 4096, LEN = 64 };
#define FIXED ((void *)0x5a0000000000ull)

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

static void wait_for_eof(void)
{
	char line[64];
	while (fgets(line, sizeof(line), stdin))
		;
}

static int all(const unsigned char *p, size_t n, unsigned char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
}

static unsigned char *two_pages(unsigned char first, unsigned char second)
{
	unsigned char *p = mmap(FIXED, 2 * PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != FIXED)
		FAIL("mmap at %p: %s", FIXED, strerror(errno));
	memset(p, first, PAGE);
	memset(p + PAGE, second, PAGE);
	return p;
}

static int hold(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	unsigned char *page = aligned_alloc(PAGE, PAGE);
	memset(page, 'A', PAGE);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, page, PAGE, ACCESS) : NULL;
	if (!mr)
		FAIL("device, PD or MR: %s", strerror(errno));
	printf("%u %llx\n", mr->rkey, (unsigned long long)(uintptr_t)page);
	fflush(stdout);
	wait_for_eof();
	if (!all(page, PAGE, 'A'))
		FAIL("hold: the page was written");
	printf("hold: intact\n");
	return 0;
}

static int steal(uint32_t rkey, uint64_t addr)
{
	struct ibv_qp *a, *b;
	unsigned char *buf = calloc(1, PAGE);
	struct ibv_pd *pd = loopback(&a, &b);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGE, ACCESS);
	if (!mr)
		FAIL("ibv_reg_mr");
	enum ibv_wc_status r = rdma(a, IBV_WR_RDMA_READ, (uintptr_t)buf, LEN, mr->lkey, addr, rkey);
	if (all(buf, LEN, 'A'))
		FAIL("steal: read the other program's bytes");
	/* A second pair (and CQ): the READ's error moved the first to the error state. */
	pd = loopback(&a, &b);
	mr = ibv_reg_mr(pd, buf, PAGE, ACCESS);
	if (!mr)
		FAIL("ibv_reg_mr");
	memset(buf, 'B', LEN);
	enum ibv_wc_status w = rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf, LEN, mr->lkey, addr, rkey);
	printf("steal: read %s, write %s\n", ibv_wc_status_str(r), ibv_wc_status_str(w));
	return 0;
}

static int limits(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		FAIL("device, PD or CQ");
	struct ibv_qp_init_attr init = rc_init(cq);
	int qps = 0, mrs = 0, qp_errno, mr_errno;
	while (ibv_create_qp(pd, &init))
		if (++qps > 1000)
			FAIL("no QP limit");
	qp_errno = errno;
	size_t len = 256 * 1024;
	for (;;) {
		void *p = aligned_alloc(PAGE, len);
		if (!ibv_reg_mr(pd, p, len, ACCESS))
			break;
		if (++mrs > 1000)
			FAIL("no MR limit");
	}
	mr_errno = errno;
	printf("limits: %d qps (errno %d), %d mrs (errno %d)\n", qps, qp_errno, mrs, mr_errno);
	return 0;
}

static int reuse(void)
{
	unsigned char *p = two_pages('A', 'a');
	struct ibv_qp *a, *b;
	struct ibv_pd *pd = loopback(&a, &b);
	struct ibv_mr *mr = ibv_reg_mr(pd, p, 2 * PAGE, ACCESS);
	if (!mr)
		FAIL("ibv_reg_mr");
	pid_t child = fork();
	if (child < 0)
		FAIL("fork");
	if (child > 0) {
		/* The parent, whose memory the daemon serves this connection from, goes. */
		printf("reuse: pid %d\n", getpid());
		fflush(stdout);
		_exit(0);
	}
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		FAIL("no go");
	enum ibv_wc_status s = rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)p, LEN, mr->lkey,
				    (uintptr_t)p + PAGE, mr->rkey);
	printf("reuse: write %s\n", ibv_wc_status_str(s));
	return 0;
}

static int victim(void)
{
	unsigned char *p = two_pages('V', 'v');
	printf("victim: ready\n");
	fflush(stdout);
	wait_for_eof();
	printf("victim: %s\n", all(p + PAGE, PAGE, 'v') && all(p, PAGE, 'V') ? "intact" : "written");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "hold"))
		return hold();
	if (!strcmp(mode, "steal") && argc == 4)
		return steal(strtoul(argv[2], NULL, 0), strtoull(argv[3], NULL, 16));
	if (!strcmp(mode, "limits"))
		return limits();
	if (!strcmp(mode, "reuse"))
		return reuse();
	if (!strcmp(mode, "victim"))
		return victim();
	FAIL("usage: shared hold | steal RKEY ADDR | limits | reuse | victim");
}

/* Memory regions named by an IOVA other than their address (ibv_reg_mr_iova): two RC QPs of
 * one device, connected to each other, WRITE and READ between two regions whose work requests
 * name them by their IOVAs. A WRITE that names the target's real address instead is a remote
 * access error. Prints "iova: ok", or what went wrong and exits 1. */
#define PROGRAM "iova"
#include "loopback.h"

enum { SIZE = 4096 };
static const uint64_t LOCAL_IOVA = 0x7000, REMOTE_IOVA = 0x100000000ull;

int main(void)
{
	struct ibv_qp *a, *b;
	struct ibv_pd *pd = loopback(&a, &b);

	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	unsigned char *local = calloc(1, SIZE), *remote = calloc(1, SIZE);
	struct ibv_mr *lmr = ibv_reg_mr_iova(pd, local, SIZE, LOCAL_IOVA, access);
	struct ibv_mr *rmr = ibv_reg_mr_iova(pd, remote, SIZE, REMOTE_IOVA, access);
	if (!lmr || !rmr)
		FAIL("ibv_reg_mr_iova");
	if (lmr->addr != local || rmr->addr != remote)
		FAIL("the MR's addr is not the buffer's");

	/* A WRITE from the local region's IOVA + 16 to the remote one's + 128. */
	for (int i = 0; i < SIZE; i++) {
		local[i] = (unsigned char)(i * 7 + 1);
		remote[i] = (unsigned char)(i * 3 + 2);
	}
	if (rdma(a, IBV_WR_RDMA_WRITE, LOCAL_IOVA + 16, 64, lmr->lkey, REMOTE_IOVA + 128,
		 rmr->rkey) != IBV_WC_SUCCESS)
		FAIL("WRITE by IOVA failed");
	if (memcmp(remote + 128, local + 16, 64))
		FAIL("WRITE landed elsewhere");
	/* A READ of the remote region's IOVA + 1024 into the local one's + 2048. */
	if (rdma(a, IBV_WR_RDMA_READ, LOCAL_IOVA + 2048, 32, lmr->lkey, REMOTE_IOVA + 1024,
		 rmr->rkey) != IBV_WC_SUCCESS)
		FAIL("READ by IOVA failed");
	if (memcmp(local + 2048, remote + 1024, 32))
		FAIL("READ came from elsewhere");
	/* The buffer's own address is no name of the remote region. */
	enum ibv_wc_status s = rdma(a, IBV_WR_RDMA_WRITE, LOCAL_IOVA, 8, lmr->lkey,
				    (uintptr_t)remote, rmr->rkey);
	if (s != IBV_WC_REM_ACCESS_ERR)
		FAIL("WRITE to the address: %s, want remote access error", ibv_wc_status_str(s));
	printf("iova: ok\n");
	return 0;
}

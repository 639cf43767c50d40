/* Two MPI ranks check what they exchange: a ping-pong whose every byte is checked, an
 * allreduce, and a one-sided window (MPI_Put and MPI_Get between fences). Prints the ping-pong's
 * latency (8 bytes, half a round trip) and bandwidth (1 MiB messages), then "mpi_check: ok".
 * Any wrong byte or sum ends it with "mpi_check: ..." and MPI_Abort. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static void fail(const char *what, long at, long got, long want)
{
	fprintf(stderr, "mpi_check: rank %d: %s: at %ld got %ld, want %ld\n", rank, what, at, got,
		want);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The byte at offset i of message n from rank r. */
static unsigned char pattern(int r, int n, size_t i)
{
	return (unsigned char)(r * 131 + n * 31 + i * 7 + (i >> 8));
}

static void fill(unsigned char *buf, size_t len, int r, int n)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(r, n, i);
}

static void check(const unsigned char *buf, size_t len, int r, int n)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(r, n, i))
			fail("ping-pong byte", (long)i, buf[i], pattern(r, n, i));
}

/* Round trips of `len` bytes, every message checked; the seconds they took. */
static double pingpong(unsigned char *out, unsigned char *in, size_t len, int iters)
{
	int peer = 1 - rank;
	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (int n = 0; n < iters; n++) {
		if (rank == 0) {
			fill(out, len, rank, n);
			MPI_Send(out, (int)len, MPI_BYTE, peer, n, MPI_COMM_WORLD);
			MPI_Recv(in, (int)len, MPI_BYTE, peer, n, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(in, len, peer, n);
		} else {
			MPI_Recv(in, (int)len, MPI_BYTE, peer, n, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(in, len, peer, n);
			fill(out, len, rank, n);
			MPI_Send(out, (int)len, MPI_BYTE, peer, n, MPI_COMM_WORLD);
		}
	}
	return MPI_Wtime() - start;
}

int main(int argc, char **argv)
{
	int size;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "mpi_check: run it with -np 2\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	size_t big = 1 << 20;
	unsigned char *out = malloc(big), *in = malloc(big);

	/* Every size from eager to rendezvous, each checked. */
	for (size_t len = 1; len <= big; len *= 4)
		pingpong(out, in, len, 20);
	int lat_iters = 2000, bw_iters = 100;
	double lat = pingpong(out, in, 8, lat_iters) / lat_iters / 2 * 1e6;
	double bw = 2.0 * bw_iters * big / pingpong(out, in, big, bw_iters) / 1e6;

	/* Allreduce: each rank adds its own values. */
	enum { N = 4096 };
	static int64_t mine[N], sum[N];
	for (int i = 0; i < N; i++)
		mine[i] = (int64_t)(rank + 1) * i;
	MPI_Allreduce(mine, sum, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < N; i++)
		if (sum[i] != 3 * (int64_t)i)
			fail("allreduce", i, (long)sum[i], 3L * i);

	/* A window of N words per rank: each puts into the other's first half and gets the
	 * other's second half. */
	int64_t *base;
	MPI_Win win;
	MPI_Win_allocate(N * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
			 &win);
	for (int i = 0; i < N; i++)
		base[i] = rank * 1000000 + i;
	static int64_t put[N / 2], got[N / 2];
	for (int i = 0; i < N / 2; i++)
		put[i] = -(rank * 1000000 + i) - 1;
	int peer = 1 - rank;
	MPI_Win_fence(0, win);
	MPI_Put(put, N / 2, MPI_INT64_T, peer, 0, N / 2, MPI_INT64_T, win);
	MPI_Get(got, N / 2, MPI_INT64_T, peer, N / 2, N / 2, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N / 2; i++) {
		if (base[i] != -(peer * 1000000 + i) - 1)
			fail("window put", i, (long)base[i], -(peer * 1000000L + i) - 1);
		if (got[i] != peer * 1000000 + N / 2 + i)
			fail("window get", i, (long)got[i], peer * 1000000L + N / 2 + i);
	}
	MPI_Win_free(&win);

	if (rank == 0) {
		printf("latency_us %.2f\nbandwidth_MBps %.1f\n", lat, bw);
		printf("mpi_check: ok\n");
	}
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}

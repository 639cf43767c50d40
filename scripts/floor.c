// The floors the program benchmarks compare against (scripts/bench-programs builds and runs it):
//   floor memcpy    MB/s of memcpy between two cache-resident 64 KiB buffers
//   floor pingpong  one-way latency (us, median of batches) of a ping-pong between two
//                   processes over one shared cache line, both sides spinning: no same-host
//                   path between two programs can be faster
//   floor vmwrite   us per 8-byte write into another process, 64 writes 64 bytes apart per
//                   process_vm_writev (as the daemon writes a pass of 8-byte WRITEs into a
//                   program): what each such message costs the daemon beside the engine
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { LEN = 65536, COPIES = 100000, BATCHES = 2001, TRIPS = 100, RUNS = 64, CALLS = 20000 };

static int vmwrite(void) {
    static char buf[RUNS * 64];
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    char src[8] = "softrnc";
    struct iovec local[RUNS], remote[RUNS];
    for (int i = 0; i < RUNS; i++) {
        local[i] = (struct iovec){src, sizeof src};
        remote[i] = (struct iovec){buf + i * 64, sizeof src};
    }
    double t = now();
    for (int c = 0; c < CALLS; c++) {
        if (process_vm_writev(child, local, RUNS, remote, RUNS, 0) != RUNS * (long)sizeof src) {
            perror("process_vm_writev");
            kill(child, SIGKILL);
            return 1;
        }
    }
    printf("%.3f\n", (now() - t) / CALLS / RUNS * 1e6);
    kill(child, SIGKILL);
    wait(NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "memcpy")) {
        char *a = malloc(LEN), *b = malloc(LEN);
        memset(a, 1, LEN);
        memset(b, 2, LEN);
        double t = now();
        for (int i = 0; i < COPIES; i++) {
            memcpy(i & 1 ? a : b, i & 1 ? b : a, LEN);
            __asm__ volatile("" ::: "memory");
        }
        printf("%.0f\n", (double)LEN * COPIES / (now() - t) / 1e6);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "vmwrite"))
        return vmwrite();
    if (argc != 2 || strcmp(argv[1], "pingpong")) {
        fprintf(stderr, "usage: floor memcpy|pingpong|vmwrite\n");
        return 2;
    }
    _Atomic long *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    long trips = (long)BATCHES * TRIPS;
    if (fork() == 0) {
        for (long i = 1; i < 2 * trips; i += 2) {
            while (atomic_load_explicit(line, memory_order_acquire) != i) {}
            atomic_store_explicit(line, i + 1, memory_order_release);
        }
        _exit(0);
    }
    static double batch[BATCHES];
    for (long b = 0, i = 0; b < BATCHES; b++) {
        double t = now();
        for (int k = 0; k < TRIPS; k++, i += 2) {
            atomic_store_explicit(line, i + 1, memory_order_release);
            while (atomic_load_explicit(line, memory_order_acquire) != i + 2) {}
        }
        batch[b] = (now() - t) / TRIPS / 2 * 1e6;
    }
    wait(NULL);
    qsort(batch, BATCHES, sizeof batch[0], by_value);
    printf("%.3f\n", batch[BATCHES / 2]);
    return 0;
}

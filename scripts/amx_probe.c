// AMX throughput probe (docs/PERFORMANCE.md, "AMX, probed"): asks the kernel for the
// tile data state, then times four independent 16x16x64 tdpbusd per iteration.
//   gcc -O2 -mamx-tile -mamx-int8 scripts/amx_probe.c -o /tmp/amx_probe && /tmp/amx_probe
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <time.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette; uint8_t start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  long r = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
  printf("arch_prctl rc=%ld\n", r); if(r) return 1;
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  for(int i=0;i<8;i++){c.rows[i]=16;c.colsb[i]=64;}
  _tile_loadconfig(&c);
  static int8_t a[16*64] __attribute__((aligned(64))); static uint8_t b[16*64] __attribute__((aligned(64))); static int32_t o[16*16] __attribute__((aligned(64)));
  for(int i=0;i<1024;i++){a[i]=(i%7)-3;b[i]=i%5;}
  _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
  _tile_loadd(4,a,64);_tile_loadd(5,b,64);_tile_loadd(6,a,64);_tile_loadd(7,b,64);
  long n=20000000; double t0=now();
  for(long i=0;i<n;i++){ _tile_dpbusd(0,5,4); _tile_dpbusd(1,7,4); _tile_dpbusd(2,5,6); _tile_dpbusd(3,7,6);}
  double dt=now()-t0;
  _tile_stored(0,o,64);
  double macs = 4.0*n*16*16*64;
  printf("o[0]=%d  %.1f GMAC/s (%.2f ns per tdpbusd)\n", o[0], macs/dt/1e9, dt/(4.0*n)*1e9);
  _tile_release();
  return 0;
}

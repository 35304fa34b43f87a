/* Time two or more builds of the GGUF-native kernel (wrap.c) on one synthetic matrix, alternating call by call:
 *   gcc -O2 driver.c -o driver -ldl -lm
 *   [ROWS=1] [HUGE=1] ./driver KIND N K n REPEATS THREADS ./lib_a.so ./lib_b.so ...
 * KIND 4 (Q4_K) or 6 (Q6_K); random blocks (scales in range), random activations; ROWS=1 times the rows loop
 * (through qk_linear, quantization included) instead of the cols loop (gemm_cols); HUGE=1 asks for huge pages on the weights (madvise). Prints each
 * build's median and quartiles, and whether its output equals the first build's bit for bit (else the largest
 * difference). Used for docs/bench/rows-loop-2026-12-08-amd.md. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <sys/mman.h>
typedef void (*cols_fn)(int, const void*, int64_t, int64_t, const float*, const int8_t*, const int16_t*, const int32_t*, int64_t, float*, int);
typedef void (*rows_fn)(int, const void*, int64_t, int64_t, const float*, int64_t, float*, int);
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int kind=atoi(argv[1]); int64_t N=atoi(argv[2]),K=atoi(argv[3]); int n=atoi(argv[4]); int reps=atoi(argv[5]); int th=atoi(argv[6]); int nv=argc-7;
  void *h[8]; cols_fn f[8]; for(int v=0;v<nv;v++){h[v]=dlopen(argv[7+v],RTLD_NOW|RTLD_LOCAL); if(!h[v]){printf("%s\n",dlerror());return 1;} f[v]=(cols_fn)dlsym(h[v],getenv("ROWS")?"bench_rows":"bench_cols");}
  void (*cq4)(const void*,int64_t,int64_t,void*)=dlsym(h[0], kind==4?"qk_cols_q4":"qk_cols_q6"); int (*bb)(void)=dlsym(h[0], kind==4?"qk_q4_block_bytes":"qk_q6_block_bytes"); int (*cb_)(void)=dlsym(h[0], kind==4?"qk_q4_col_bytes":"qk_q6_col_bytes");
  void (*quant)(const float*,int64_t,int64_t,float*,int8_t*,int16_t*,int)=dlsym(h[0],"qk_quantize"); void (*minp)(const int16_t*,int64_t,int32_t*)=dlsym(h[0],"bench_minpairs");
  int64_t nb=K/256; srand(1); size_t bsz=bb(); size_t btot=(N*nb*bsz+(2<<20)-1)/(2<<20)*(2<<20); uint8_t*blocks=aligned_alloc(2<<20,btot); if(getenv("HUGE")) madvise(blocks,btot,14); for(size_t i=0;i<N*nb*bsz;i++) blocks[i]=rand();
  for(int64_t i=0;i<N*nb;i++){ uint8_t*b=blocks+i*bsz; float d=0.01f*(rand()%100); memcpy(b,&d,4); if(kind==4){float dm=0.001f*(rand()%100); memcpy(b+4,&dm,4); for(int s=0;s<16;s++) b[8+s]&=63;} }
  int64_t panels=(N+15)/16; size_t csz=cb_(); size_t tot=(panels*nb*csz+(2<<20)-1)/(2<<20)*(2<<20); void*cols=aligned_alloc(2<<20,tot); if(getenv("HUGE")) madvise(cols,tot,14);
  cq4(blocks,N,nb,cols);
  float*x=malloc(n*K*4); for(int64_t i=0;i<n*K;i++) x[i]=(rand()%2001-1000)/500.0f;
  float*xd=malloc(n*nb*4); int8_t*xq=malloc(n*K); int16_t*xs=malloc(n*nb*32); int32_t*mp=malloc(n*nb*16); quant(x,n,K,xd,xq,xs,1); minp(xs,n*nb,mp);
  float*y[8]; double *ts[8]; for(int v=0;v<nv;v++){y[v]=malloc(n*N*4); ts[v]=malloc(reps*8);}
  for(int r=-2;r<reps;r++) for(int v=0;v<nv;v++){ double t0=now(); if(getenv("ROWS")) ((rows_fn)f[v])(kind,blocks,N,K,x,n,y[v],th); else f[v](kind,cols,N,K,xd,xq,xs,mp,n,y[v],th); if(r>=0) ts[v][r]=now()-t0; }
  for(int v=0;v<nv;v++){ qsort(ts[v],reps,8,cmpd); int same=memcmp(y[0],y[v],n*N*4)==0; double md=0,mr=0; for(int64_t i=0;i<n*N;i++){double d=fabs(y[0][i]-y[v][i]); if(d>md)md=d; double a=fabs(y[0][i]); if(a>mr)mr=a;} printf("%s kind %d %ldx%ld n=%d: median %.1f us (q1 %.1f q3 %.1f) %s\n", argv[7+v], kind,N,K,n, ts[v][reps/2]*1e6, ts[v][reps/4]*1e6, ts[v][3*reps/4]*1e6, same?"same":"DIFF"); if(!same) printf("   max abs diff %.3g (max |y| %.3g)\n", md, mr); }
}

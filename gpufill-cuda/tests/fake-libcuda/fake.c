// A stand-in libcuda.so for running gpufill-cuda's launcher on a machine with no GPU.
//
// It implements the driver calls gpufill-cuda makes. One stream is modelled as a time
// at which the GPU becomes free: cuLaunchKernel reads the spin kernel's u64 argument and
// queues that many nanoseconds (+3 us of launch overhead), events complete when the
// work queued before them would have. Not a test of CUDA, a test of our threads: timing,
// skipping, quiesce, drop, error paths, queue depth. Not built by cargo.
//
//   cc -shared -fPIC -O2 -o /tmp/fake/libcuda.so fake.c -lpthread
//   FAKE_REPORT=1 LD_LIBRARY_PATH=/tmp/fake cargo test -p gpufill-cuda --test hardware -- --ignored --nocapture --test-threads=1
//
// FAKE_REPORT=1 prints, at exit, graph launches, kernels, busy time, span and the longest
// queue seen. Stream capture records a thread's launches into a graph; launching the
// graph queues them as launches would.
//
// Queue depth: at each launch the fake counts our kernels not yet finished, the new one
// included, and keeps the largest count seen per stream (reset when a stream is created,
// i.e. at each open), split by who launched: the thread that created the stream (the
// caller's, for bursts) or any other thread (the one-in-flight pacing thread). The
// device name reports them, so a test can read them through devices() without a hook:
//   "Fake GPU (queued: 5 by the opening thread, 1 by other threads)"
// The current context is per thread, as in the real driver: a launch or event record
// on a thread that never bound the context fails with CUDA_ERROR_INVALID_CONTEXT (201).
// FAKE_FAIL_AFTER=n makes every launch after n kernels fail with FAKE_FAIL_CODE
// (default 719, CUDA_ERROR_LAUNCH_FAILED; 2 is CUDA_ERROR_OUT_OF_MEMORY). A kernel of
// exactly 777777 ns always fails with 719: a test breaks the context on purpose with it.
// A kernel of exactly 666666 ns runs 2 ms longer, as if another context's time slice
// had held the GPU meanwhile.
// Events keep timing: cuEventElapsedTime is the difference of the times the queue
// reached them. FAKE_FOREIGN=path: at each event record, if that file exists, it is
// removed and 150 us of another context's work (and a context switch) is put on the
// GPU first, so our next start shows it, as on a real GPU. With FAKE_FOREIGN_AT_LAUNCH=1
// it comes at the next launch instead, after the start event: as where the GPU stamps
// an event before the context switch that the kernel then waits for.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t now_ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return (uint64_t)t.tv_sec*1000000000ull+t.tv_nsec;}
static uint64_t busy_until, busy_total, kernels, max_queue_ns, first_launch, last_end;
static unsigned ctx_flags; static int retained; static size_t stack=1024;
static __thread CUcontext current; static int ctx_obj;
#define RING 1024
static uint64_t ends[RING]; static unsigned ring_next;
static pthread_t opener; static unsigned max_by_opener, max_by_others;
typedef struct { uint64_t done_at; unsigned flags; } ev_t;
static unsigned long graph_launches;
static void report(void){ if(getenv("FAKE_REPORT")) fprintf(stderr,"fake: graph_launches=%lu kernels=%llu busy=%.1fms span=%.1fms max_queue=%.2fms retained=%d stack=%zu flags=%u\n",graph_launches,(unsigned long long)kernels,busy_total/1e6,(last_end-first_launch)/1e6,max_queue_ns/1e6,retained,stack,ctx_flags);}
__attribute__((constructor)) static void init_(void){ atexit(report); }
CUresult cuInit(unsigned f){return 0;}
CUresult cuDriverGetVersion(int*v){*v=13000;return 0;}
CUresult cuDeviceGetCount(int*c){*c=1;return 0;}
CUresult cuDeviceGet(CUdevice*d,int o){if(o!=0)return 101;*d=0;return 0;}
CUresult cuDeviceGetName(char*n,int len,CUdevice d){pthread_mutex_lock(&mu);snprintf(n,len,"Fake GPU (queued: %u by the opening thread, %u by other threads)",max_by_opener,max_by_others);pthread_mutex_unlock(&mu);return 0;}
CUresult cuDeviceGetUuid(unsigned char*u,CUdevice d){for(int i=0;i<16;i++)u[i]=0xa0+i;return 0;}
CUresult cuDeviceGetUuid_v2(unsigned char*u,CUdevice d){return cuDeviceGetUuid(u,d);}
CUresult cuDeviceTotalMem_v2(size_t*b,CUdevice d){*b=(size_t)141<<30;return 0;}
CUresult cuDeviceGetAttribute(int*v,int a,CUdevice d){*v= a==16?132: a==75?9: a==76?0: 1;return 0;}
CUresult cuDevicePrimaryCtxGetState(CUdevice d,unsigned*f,int*a){*f=ctx_flags;*a=retained>0;return 0;}
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d,unsigned f){ctx_flags=f;return 0;}
CUresult cuDevicePrimaryCtxRetain(CUcontext*c,CUdevice d){retained++;*c=&ctx_obj;return 0;}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d){retained--; if(!retained) stack=1024; return 0;}
CUresult cuCtxGetCurrent(CUcontext*c){*c=current;return 0;}
CUresult cuCtxSetCurrent(CUcontext c){current=c;return 0;}
CUresult cuCtxSetLimit(int l,size_t v){if(l==0)stack=v;return 0;}
CUresult cuCtxGetLimit(size_t*v,int l){*v= l==0?stack:0;return 0;}
CUresult cuCtxSynchronize(void){return 0;}
CUresult cuCtxGetStreamPriorityRange(int*l,int*g){*l=0;*g=-5;return 0;}
CUresult cuMemGetInfo_v2(size_t*f,size_t*t){*t=(size_t)141<<30;*f=*t-(254u<<20);return 0;}
CUresult cuModuleLoadData(CUmodule*m,const void*img){*m=malloc(1);return strstr(img,".entry spin(")?0:218;}
CUresult cuModuleUnload(CUmodule m){free(m);return 0;}
CUresult cuModuleGetFunction(CUfunction*f,CUmodule m,const char*n){*f=(void*)1;return strcmp(n,"spin")&&strcmp(n,"spin_sleep")?500:0;}
CUresult cuFuncGetAttribute(int*v,int a,CUfunction f){*v=0;return 0;}
CUresult cuStreamCreateWithPriority(CUstream*s,unsigned f,int p){*s=malloc(1);pthread_mutex_lock(&mu);opener=pthread_self();max_by_opener=max_by_others=0;pthread_mutex_unlock(&mu);return 0;}
CUresult cuStreamDestroy_v2(CUstream s){free(s);return 0;}
CUresult cuEventCreate(CUevent*e,unsigned f){ev_t*v=calloc(1,sizeof(ev_t));v->flags=f;*e=v;return 0;}
CUresult cuEventDestroy_v2(CUevent e){free(e);return 0;}
static void foreign_work(uint64_t n,int at_launch){const char*f=getenv("FAKE_FOREIGN"); if(!f||at_launch!=(getenv("FAKE_FOREIGN_AT_LAUNCH")!=0))return; if(remove(f)==0) busy_until=(busy_until>n?busy_until:n)+150000;}
static __thread uint64_t *capturing; static __thread unsigned captured, capture_cap; static __thread int is_capturing;
static CUresult queue_kernel(uint64_t ns){
  static long fail_after=-2; if(fail_after==-2){const char*e=getenv("FAKE_FAIL_AFTER");fail_after=e?atol(e):-1;}
  if(fail_after>=0 && (long)kernels>=fail_after) return getenv("FAKE_FAIL_CODE")?atoi(getenv("FAKE_FAIL_CODE")):719;
  if(!current) return 201;
  if(ns==777777) return 719;
  pthread_mutex_lock(&mu); uint64_t n=now_ns(); foreign_work(n,1);
  if(!first_launch) first_launch=n;
  uint64_t start= busy_until>n?busy_until:n; if(busy_until>n && busy_until-n>max_queue_ns) max_queue_ns=busy_until-n;
  busy_until=start+ns+3000+(ns==666666?2000000:0); busy_total+=ns; kernels++; last_end=busy_until;
  unsigned queued=1; for(int i=0;i<RING;i++) if(ends[i]>n) queued++;
  ends[ring_next++%RING]=busy_until;
  if(pthread_equal(pthread_self(),opener)){ if(queued>max_by_opener) max_by_opener=queued; }
  else if(queued>max_by_others) max_by_others=queued;
  pthread_mutex_unlock(&mu); return 0;}
CUresult cuLaunchKernel(CUfunction f,unsigned gx,unsigned gy,unsigned gz,unsigned bx,unsigned by,unsigned bz,unsigned sm,CUstream s,void**params,void**extra){
  uint64_t ns=*(uint64_t*)params[0];
  if(is_capturing){ if(captured==capture_cap){capture_cap=capture_cap?2*capture_cap:16;capturing=realloc(capturing,capture_cap*sizeof *capturing);} capturing[captured++]=ns; return 0; }
  return queue_kernel(ns);}
/* Graphs: a capture records the launches on its thread; a graph launch queues them as
   launches would (a graph of n kernels counts n in the queue depth). */
typedef struct { unsigned n; uint64_t ns[]; } graph_t;
CUresult cuStreamBeginCapture_v2(CUstream s,int mode){if(is_capturing)return 900;is_capturing=1;captured=0;return 0;}
CUresult cuStreamEndCapture(CUstream s,void**g){if(!is_capturing)return 400;is_capturing=0;graph_t*v=malloc(sizeof(graph_t)+captured*sizeof(uint64_t));v->n=captured;memcpy(v->ns,capturing,captured*sizeof(uint64_t));*g=v;return 0;}
CUresult cuStreamIsCapturing(CUstream s,int*st){*st=is_capturing;return 0;}
CUresult cuGraphInstantiateWithFlags(void**exec,void*g,unsigned long long flags){graph_t*v=g;graph_t*c=malloc(sizeof(graph_t)+v->n*sizeof(uint64_t));memcpy(c,v,sizeof(graph_t)+v->n*sizeof(uint64_t));*exec=c;return 0;}
CUresult cuGraphUpload(void*exec,CUstream s){return 0;}
CUresult cuGraphLaunch(void*exec,CUstream s){graph_t*v=exec;if(is_capturing)return 900;for(unsigned i=0;i<v->n;i++){CUresult r=queue_kernel(v->ns[i]);if(r)return r;}graph_launches++;return 0;}
CUresult cuGraphDestroy(void*g){free(g);return 0;}
CUresult cuGraphExecDestroy(void*e){free(e);return 0;}
CUresult cuEventRecord(CUevent e,CUstream s){if(!current)return 201;pthread_mutex_lock(&mu);uint64_t n=now_ns();foreign_work(n,0);((ev_t*)e)->done_at=busy_until>n?busy_until:n;pthread_mutex_unlock(&mu);return 0;}
/* As the real driver: events created with CU_EVENT_DISABLE_TIMING (2) have no time. */
CUresult cuEventElapsedTime(float*ms,CUevent a,CUevent b){if((((ev_t*)a)->flags|((ev_t*)b)->flags)&2)return 400;*ms=(float)(((double)((ev_t*)b)->done_at-(double)((ev_t*)a)->done_at)/1e6);return 0;}
CUresult cuEventQuery(CUevent e){return now_ns()>=((ev_t*)e)->done_at?0:600;}
CUresult cuEventSynchronize(CUevent e){uint64_t d=((ev_t*)e)->done_at,n=now_ns(); if(d>n){struct timespec t={ (d-n)/1000000000ull,(d-n)%1000000000ull}; nanosleep(&t,0);} return 0;}
CUresult cuGetErrorName(CUresult r,const char**s){*s="CUDA_ERROR_FAKE";return 0;}
CUresult cuGetErrorString(CUresult r,const char**s){*s="fake error";return 0;}

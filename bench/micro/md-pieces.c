/* The fixed costs of one file operation on this machine (BENCHMARKS.md, issue 18 stop 52):
 * tmpfs stat and open+read+close next to the adapter's own pieces (its placeholder
 * descriptor, its path resolver). Usage: md-pieces DIR (DIR holds a 4 KiB file f1).
 * Build: cc -O2 -o md-pieces md-pieces.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){int N=200000; char buf[4096]; double a,b;
 a=now(); for(int i=0;i<N;i++){int fd=memfd_create("strata",MFD_CLOEXEC|MFD_ALLOW_SEALING); fcntl(fd,F_ADD_SEALS,F_SEAL_GROW|F_SEAL_SHRINK|F_SEAL_WRITE); close(fd);} b=now(); printf("memfd_create+seal+close %.2f us\n",(b-a)/N);
 struct open_how h={0}; h.flags=O_PATH|O_DIRECTORY|O_CLOEXEC; h.resolve=RESOLVE_NO_SYMLINKS;
 a=now(); for(int i=0;i<N;i++){int d=syscall(SYS_openat2,AT_FDCWD,argv[1],&h,sizeof h); struct stat st; fstatat(d,"f1",&st,0); close(d);} b=now(); printf("openat2(dir)+fstatat+close %.2f us\n",(b-a)/N);
 char p[4096]; snprintf(p,sizeof p,"%s/f1",argv[1]);
 a=now(); for(int i=0;i<N;i++){struct stat st; stat(p,&st);} b=now(); printf("stat %.2f us\n",(b-a)/N);
 a=now(); for(int i=0;i<N;i++){int fd=open(p,O_RDONLY); read(fd,buf,4096); close(fd);} b=now(); printf("open+read+close %.2f us\n",(b-a)/N);
 return 0;}

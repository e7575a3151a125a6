/*
 * C99 <math.h> prototypes for model code built against Zephyr's minimal libc.
 *
 * The minimal libc's math.h declares almost nothing, and Zephyr compiles with -ffreestanding
 * (no implicit built-ins): a kernel's call to roundf() or expf() would be an implicit
 * `int f()` and return garbage. templates/zephyr/CMakeLists.txt.j2 force-includes this header
 * into the archive's sources; the definitions come from the toolchain's libm.a.
 */
#ifndef MTVG_LIBM_H_
#define MTVG_LIBM_H_

float expf(float x);
float logf(float x);
float log2f(float x);
float powf(float x, float y);
float sqrtf(float x);
float tanhf(float x);
float roundf(float x);
float floorf(float x);
float ceilf(float x);
float truncf(float x);
float fabsf(float x);
float fmodf(float x, float y);
float fminf(float x, float y);
float fmaxf(float x, float y);
float erff(float x);
float sinf(float x);
float cosf(float x);
float atanf(float x);
float nearbyintf(float x);
double exp(double x);
double log(double x);
double pow(double x, double y);
double sqrt(double x);
double tanh(double x);
double round(double x);
double floor(double x);
double ceil(double x);
double fabs(double x);
double erf(double x);

#endif /* MTVG_LIBM_H_ */

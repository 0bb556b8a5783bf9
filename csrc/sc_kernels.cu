// The generic symmetric-contraction kernels (term list read at run time): the fallback for
// term lists without a generated kernel library (sc_kernels.cuh, md_accel/ops/_sc_codegen.py).
#include "sc_kernels.cuh"

namespace md_accel {

template <typename T>
const char* sc_generic_launch(int mode, const SCArgs<T>* args, cudaStream_t stream) {
  if (args->num_in > kSCGenericMaxIn || args->num_out > kSCGenericMaxOut || args->term_width - 2 > kSCGenericMaxNu)
    return "term list too large for the generic kernels";
  return sc::launch(mode, *args, sc::main_launches<sc::GenericBody, T>(), stream);
}

template const char* sc_generic_launch<float>(int, const SCArgs<float>*, cudaStream_t);
template const char* sc_generic_launch<double>(int, const SCArgs<double>*, cudaStream_t);

}  // namespace md_accel

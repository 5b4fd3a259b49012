#include "ddstage/store_descriptor.hpp"
